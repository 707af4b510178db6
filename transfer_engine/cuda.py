"""The CUDA driver as this build sees it: loaded at run time (dlopen("libcuda.so.1")), so kvstore builds,
installs and imports without CUDA; on a machine without a driver or GPU every GPU path fails with one
clear NotSupportedError, raised by `require()`."""

from __future__ import annotations

from transfer_engine import _core
from transfer_engine.errors import NotSupportedError


def require() -> None:
    """Raises NotSupportedError (saying why) unless a CUDA driver and at least one GPU are usable."""
    _core.cuda_require()


def device_count() -> int:
    """GPUs the driver sees (0 without a driver)."""
    return int(_core.cuda_device_count())


def available() -> bool:
    try:
        require()
    except NotSupportedError:
        return False
    return True
