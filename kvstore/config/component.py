"""The base of kvstore's component configs: the engine's settings loader, plus a check that every
``KVSTORE_*`` variable in the environment means something (a typo is an error naming the variable)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, TypeVar

from transfer_engine.settings import Settings

C = TypeVar("C", bound="Component")


class Component(Settings):
    @classmethod
    def load(cls: type[C], env: Mapping[str, str] | None = None, /, **overrides: Any) -> C:
        from kvstore.config.environment import check_environment

        env = os.environ if env is None else env
        check_environment(env)
        return super().load(env, **overrides)
