"""Space inside a segment: the C++ best-fit offset allocator (csrc/storage), the one public way into it.

The master runs one per mounted segment (and later rebuilds its maps from a journal); clients run one
over their staging area. This module loads the metadata extension only, never the data plane.
"""

from kvstore._meta import OffsetAllocator

__all__ = ["OffsetAllocator"]
