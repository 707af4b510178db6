"""The master's wire and loop: its server, process, listener and connections, leader election, metrics, status
and the store's published events. The top floor: it imports the floors below (service, planners, ledger),
none of them imports it."""
