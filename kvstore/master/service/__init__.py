"""The master's request jobs: the RPC handlers and the state's jobs (puts, removal, access, membership,
restore, reads, node work, suspicion, roles). Imports only planners and ledger."""
