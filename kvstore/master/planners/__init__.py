"""The master's planners: placement, eviction and its victims, replication, the disk tier and its space, tier
spaces. They plan and ask the ledger; they import only the ledger floor."""
