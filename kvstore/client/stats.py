"""What this client counted of its own calls (Store.stats()["client"]), kept by its reads and writes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ClientStats:
    checksum_mismatches: int = 0
    replica_failures: int = 0
    stale_locations: int = 0  # reads a node refused: the object was freed since its location was given
    degraded_puts: int = 0  # stored with fewer replicas than asked (min_replicas)
    gets: int = 0
    hits: int = 0
    puts: int = 0
    disk_reads: int = 0  # hits read straight from a disk tier's file on this host
    disk_read_failures: int = 0  # such reads that failed or did not verify (then the node loaded them)
