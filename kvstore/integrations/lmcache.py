"""LMCache remote storage on kvstore: LMCache's chunks (its own keys and memory objects) as kvstore objects.

    # lmcache config (YAML)
    remote_storage_plugins: ["kvstore"]
    extra_config:
      remote_storage_plugin.kvstore.module_path: kvstore.integrations.lmcache
      remote_storage_plugin.kvstore.class_name: KVStoreConnectorAdapter
      remote_storage_plugin.kvstore.master: "10.0.0.1:50051"     # else KVSTORE_MASTER
    # or, without the plugin list: remote_url: "kvstore://10.0.0.1:50051"

The adapter class (not a bare connector) is what LMCache must load: its plugin path builds a bare
RemoteConnector subclass without the engine metadata RemoteConnector's constructor needs, while the
adapter receives LMCache's full connector context. Settings (master, namespace, replicas, transport) come
from `remote_storage_plugin.<name>.<setting>`, else from the URL's host:port (master), else KVSTORE_*.

A chunk is stored as one object: LMCache's remote metadata header (when save_chunk_meta is on) followed by
the chunk's bytes, read back zero-copy into a chunk LMCache's local CPU backend allocates. A miss, a failed
read or a header that does not describe this engine's chunks is a miss (LMCache recomputes).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from lmcache.v1.storage_backend.connector import ConnectorAdapter, ConnectorContext, extract_plugin_type
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector

from kvstore.errors import KVStoreError
from kvstore.integrations.paged import CONNECTOR_SETTINGS, StoreLink, store_settings

log = logging.getLogger("kvstore.lmcache")

SCHEME = "kvstore://"
PLUGIN_TYPE = "kvstore"


def _settings(context: Any) -> dict[str, Any]:
    extra = dict(getattr(context.config, "extra_config", None) or {})
    plugin = getattr(context, "plugin_name", None) or PLUGIN_TYPE
    mine = {
        name: extra[f"remote_storage_plugin.{plugin}.{name}"]
        for name in CONNECTOR_SETTINGS
        if f"remote_storage_plugin.{plugin}.{name}" in extra
    }
    url = str(getattr(context, "url", "") or "")
    if url.startswith(SCHEME) and "master" not in mine:
        address = url[len(SCHEME) :].split("/", 1)[0]
        if address:
            mine["master"] = address
    return store_settings(mine)


class KVStoreRemoteConnector(RemoteConnector):
    def __init__(self, context: Any) -> None:
        local = context.local_cpu_backend
        metadata = getattr(context, "metadata", None) or getattr(local, "metadata", None)
        config = context.config if context.config is not None else getattr(local, "config", None)
        super().__init__(config, metadata)
        self.loop = context.loop
        self.local_cpu_backend = local
        self.link = StoreLink(_settings(context))
        model = getattr(metadata, "model_name", None) or "model"
        self.prefix = (self.link.namespace() or f"lmcache:{model}") + "/"
        self._header_bytes = max(int(self.remote_metadata_bytes), 1)

    def _key(self, key: Any) -> str:
        return self.prefix + key.to_string()

    def _run(self, fn: Any, *args: Any) -> Any:
        return self.loop.run_in_executor(None, fn, *args)

    # -- contains
    def exists_sync(self, key: Any) -> bool:
        store = self.link.get()
        try:
            return store is not None and store.exists(self._key(key))
        except KVStoreError:
            return False

    async def exists(self, key: Any) -> bool:
        return bool(await self._run(self.exists_sync, key))

    def support_batched_contains(self) -> bool:
        return True

    def batched_contains(self, keys: list[Any]) -> int:
        """Leading keys stored."""
        store = self.link.get()
        if store is None or not keys:
            return 0
        try:
            present = store.batch_exists([self._key(k) for k in keys])
        except KVStoreError:
            return 0
        return next((i for i, there in enumerate(present) if not there), len(present))

    # -- get / put
    def _get_sync(self, key: Any) -> Any:
        store = self.link.get()
        if store is None:
            return None
        memory_obj = self.local_cpu_backend.allocate(self.meta_shapes, self.meta_dtypes, self.meta_fmt)
        if memory_obj is None:
            return None
        data = np.frombuffer(memory_obj.byte_array, dtype=np.uint8)
        # Gets run concurrently on the loop's executor: each reads its own header.
        header_buf = np.empty(self._header_bytes, dtype=np.uint8)
        buffers = [header_buf, data] if self.save_chunk_meta else [data]
        try:
            got = store.batch_get_into_multi_buffers([self._key(key)], [buffers])[0]
            header = len(header_buf) if self.save_chunk_meta else 0
            if got < header + 1 or (self.save_chunk_meta and not self._header_ok(header_buf, got - header)):
                memory_obj.ref_count_down()
                return None
            return self.reshape_partial_chunk(memory_obj, got - header)
        except (KVStoreError, ValueError) as exc:
            log.debug("kvstore get of %s missed: %s", key, exc)
            memory_obj.ref_count_down()
            return None

    def _header_ok(self, header: np.ndarray, length: int) -> bool:
        from lmcache.v1.protocol import RemoteMetadata

        try:
            meta = RemoteMetadata.deserialize(header.tobytes())
        except Exception:  # a header we cannot parse is never trusted
            return False
        return bool(meta.length == length and meta.fmt == self.meta_fmt)

    async def get(self, key: Any) -> Any:
        return await self._run(self._get_sync, key)

    def _put_sync(self, key: Any, memory_obj: Any) -> None:
        store = self.link.get()
        if store is None:
            return
        data = np.frombuffer(memory_obj.byte_array, dtype=np.uint8)
        buffers: list[Any] = [data]
        if self.save_chunk_meta:
            from lmcache.v1.protocol import RemoteMetadata

            header = RemoteMetadata(
                len(data), memory_obj.get_shapes(), memory_obj.get_dtypes(), memory_obj.get_memory_format()
            ).serialize()
            buffers = [np.frombuffer(header, dtype=np.uint8), data]
        try:
            code = store.batch_put_from_multi_buffers([self._key(key)], [buffers])[0]
            if code < 0:
                log.debug("kvstore put of %s failed with code %d", key, code)
        except KVStoreError as exc:
            log.warning("kvstore put of %s failed: %s", key, exc)

    async def put(self, key: Any, memory_obj: Any) -> None:
        await self._run(self._put_sync, key, memory_obj)

    def remove_sync(self, key: Any) -> bool:
        store = self.link.get()
        try:
            return store is not None and store.batch_remove([self._key(key)], force=True)[0] == 0
        except KVStoreError:
            return False

    async def list(self) -> list[str]:
        return []  # the store does not enumerate keys; LMCache uses this only for debugging

    async def close(self) -> None:
        self.link.close()


class KVStoreConnectorAdapter(ConnectorAdapter):
    """What LMCache loads (remote_storage_plugin.<name>.class_name, or the kvstore:// URL scheme)."""

    def __init__(self) -> None:
        super().__init__(SCHEME)

    def can_parse(self, url: str) -> bool:
        if url.startswith(SCHEME):
            return True
        return url.startswith("plugin://") and extract_plugin_type(url[len("plugin://") :]) == PLUGIN_TYPE

    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        return KVStoreRemoteConnector(context)


__all__ = ["KVStoreConnectorAdapter", "KVStoreRemoteConnector"]
