"""Which libucp the ucx transport uses. The C++ side opens libucp.so.0 when an engine starts ucx and
takes a library already loaded under that name, so this module loads the chosen one first:
KVSTORE_UCX_LIBRARY (a system UCX with verbs, on an RDMA host: e.g. /usr/lib/x86_64-linux-gnu/libucp.so.0),
else the libucx wheel's (`pip install 'kvstore-llm[ucx]'`: tcp, shared memory and CUDA transports, no verbs),
else whatever the dynamic linker finds, else none: the transport then says why it is unavailable
(`TransferEngine.unavailable_transports`)."""

from __future__ import annotations

import ctypes
import threading

from transfer_engine.errors import InvalidArgumentError

_lock = threading.Lock()
_chosen: str | None = None  # what was loaded ("" : nothing named, the wheel's if present)


def preload(library: str = "") -> None:
    """Loads `library` (a path to libucp), else the libucx wheel's libraries, once per process. A second
    call naming another library than the first is an error: one process has one UCX."""
    global _chosen
    with _lock:
        if _chosen is not None:
            if library and library != _chosen:
                raise InvalidArgumentError(
                    f"this process already loaded UCX from {_chosen or 'the libucx wheel'}; "
                    f"it cannot switch to {library}"
                )
            return
        if library:
            try:
                ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
            except OSError as exc:
                raise InvalidArgumentError(f"KVSTORE_UCX_LIBRARY={library}: {exc}") from exc
        else:
            try:
                import libucx  # type: ignore[import-not-found,unused-ignore]
            except ImportError:
                pass
            else:
                libucx.load_library()
        _chosen = library
