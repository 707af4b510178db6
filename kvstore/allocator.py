"""Space inside a segment: the C++ best-fit offset allocator (csrc/meta/offset_allocator), a segment's fence
slots and the master's placement over its segments (csrc/meta/memory_space); the one public way into them.

The master runs one per mounted segment (and later rebuilds its maps from a journal); clients run one
over their staging area. This module loads the metadata extension only, never the data plane.
"""

from kvstore._meta import MemorySpace, OffsetAllocator, SlotPool

__all__ = ["MemorySpace", "OffsetAllocator", "SlotPool"]
