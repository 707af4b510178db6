"""The master's tables and their one writer: the ledger, its change records, the object table, fences, holds,
tombstones, puts in progress, the segment model and replica locations. The bottom floor: it imports no other
floor of the master."""
