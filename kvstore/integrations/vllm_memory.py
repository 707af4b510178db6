"""How kvstore's vLLM connector holds vLLM's KV memory: what it tells vLLM (>= 0.34) about its access, and how
it follows sleep mode, which frees that memory and commits it again.

kvstore registers every KV allocation with the store: the transfer engine moves bytes straight into and out
of vLLM's KV tensors. So the connector declares `KVCacheAccess.REGISTERS` (vLLM 0.34 then backs each KV
segment with one physical allocation, which a registration needs) and supports sleep mode:

- `unregister_kv_caches` (vLLM calls it before sleep frees the KV memory): no registration is made again
  until wake-up, every load and save in flight ends, then the registrations are dropped. From then on a
  store read into that memory is refused, and a block move tried while asleep fails per block (vLLM
  recomputes) instead of touching freed memory.
- `restore_kv_caches` (after wake-up): the KV tensors are registered again where they are now (their
  addresses and geometry are read afresh: the tensors may have moved).

vLLM 0.32 has none of these names and never calls them; `KVCacheAccess` is imported where it is asked for,
so nothing here depends on the version (no version parsing).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kvstore.errors import NotSupportedError

log = logging.getLogger("kvstore.vllm")


def registers_access() -> Any:
    """vLLM's `KVCacheAccess.REGISTERS` (vLLM >= 0.34)."""
    try:
        from vllm.config.kv_transfer import KVCacheAccess
    except ImportError as exc:
        raise NotSupportedError(f"this vLLM has no KVCacheAccess (added in vLLM 0.34): {exc}") from exc
    return KVCacheAccess.REGISTERS


class KVMemoryLifecycle:
    """Mixin of KVStoreConnector (listed before vLLM's connector base, whose no-op versions it replaces).

    What it needs from the connector: `link` (a StoreLink: `current()` is the connected Store or None),
    `mover` (a BlockMover: `drain()` waits for every move submitted), `worker_side` (None in the scheduler)
    with `registrations` (the Registrations of the KV memory, or None) and `register(kv_caches)` (builds
    the geometry from the tensors and registers it). The connector's register_kv_caches calls
    `remember_kv_caches`, and its lazy registration before a move registers only while
    `kv_memory_awake`."""

    link: Any
    mover: Any
    worker_side: Any
    _kv_tensors: dict[str, Any] | None = None
    _kv_asleep: bool = False

    @classmethod
    def kv_cache_access(cls, kv_transfer_config: Any) -> Any:
        """REGISTERS: every KV allocation is registered with the store's transfer engine."""
        return registers_access()

    @classmethod
    def supports_sleep_mode(cls, kv_transfer_config: Any) -> bool:
        return True  # unregister_kv_caches / restore_kv_caches follow the KV memory's release and re-commit

    @property
    def kv_memory_awake(self) -> bool:
        """Whether the KV memory may be registered and moved (False between sleep and wake-up)."""
        return not self._kv_asleep

    def remember_kv_caches(self, kv_caches: Mapping[str, Any]) -> None:
        """The KV tensors vLLM registered, to register them again after wake-up."""
        self._kv_tensors = dict(kv_caches)

    def unregister_kv_caches(self) -> None:
        """Before the KV memory is freed: drain every load and save, then drop its registrations.
        Idempotent; a no-op in the scheduler."""
        worker = self.worker_side
        if worker is None or self._kv_asleep:
            return
        self._kv_asleep = True  # first: no move registers this memory again from here on
        self.mover.drain()  # loads and saves in flight read or write this memory: they end first
        store = self.link.current()
        if worker.registrations is not None and store is not None:
            worker.registrations.unregister(store)
        log.info("kvstore: KV memory unregistered for sleep")

    def restore_kv_caches(self) -> None:
        """After wake-up: register the KV tensors again, at their current addresses. Idempotent."""
        worker = self.worker_side
        if worker is None or not self._kv_asleep:
            return
        if self._kv_tensors:
            worker.register(self._kv_tensors)  # geometry read afresh: the tensors may have moved
        self._kv_asleep = False
        log.info("kvstore: KV memory registered again after wake-up")


__all__ = ["KVMemoryLifecycle", "registers_access"]
