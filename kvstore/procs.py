"""`kvstore ...` child processes (the helpers live in transfer_engine.procs, the lower layer)."""

from transfer_engine.procs import READY_PREFIX, kvstore_process, module_process, stop_process

__all__ = ["READY_PREFIX", "kvstore_process", "module_process", "stop_process"]
