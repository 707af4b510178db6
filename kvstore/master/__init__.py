"""The metadata master: objects, segments, leases, eviction; msgpack RPC and HTTP metrics."""

from kvstore.config.master import MasterConfig
from kvstore.master.wire.server import EmbeddedMaster, Master

__all__ = ["EmbeddedMaster", "Master", "MasterConfig"]
