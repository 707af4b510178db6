"""The tiers a storage node contributes (its memory segment, its disk) share one interface. Peers read
and write a memory tier through the transfer engine; a disk tier is written and read by the orders on
the node's work channel (a demotion writes a record from a memory replica, a load reads one into memory).
What every tier does itself is the same: it verifies what it holds (each copy against its checksum),
restores it (mounts with the master and names back what verified, after a restart of the node or of the
master; a copy that fails is a miss, never data), and closes."""

from __future__ import annotations

from typing import Protocol


class NodeTier(Protocol):
    tier: int  # Location.tier: kvstore.rpc.messages.MEMORY | DISK
    name: str

    @property
    def kept(self) -> int:
        """Copies the last mount named back and the master took."""

    @property
    def dropped(self) -> int:
        """Copies the last mount found damaged (never named back)."""

    def mount(self) -> None:
        """Offers the tier to the master and names back the copies it holds intact."""

    def close(self, forget: bool = False) -> None:
        """Stops (work in flight finishes first); `forget`: the node leaves, nothing is to be restored."""
