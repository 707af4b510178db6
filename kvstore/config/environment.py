"""Every `KVSTORE_*` variable the project reads, and the check that the environment holds no other
(a misspelt or renamed variable would otherwise be silently ignored)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from kvstore.errors import InvalidArgumentError

# Variables that are not component settings: build switches, process plumbing, test knobs.
OTHER_VARIABLES = {
    "KVSTORE_BUILD_JOBS": "parallel compile jobs of `pip install .`",
    "KVSTORE_DEBUG_BUILD": "1: build the C++ extensions with -O0 -g",
    "KVSTORE_LIFELINE": "stdin: stop when stdin closes (set by the benches and tests for their children)",
    "KVSTORE_FUZZ_EXAMPLES": "examples per property in the slow fuzz soak (tests)",
    "KVSTORE_TEST_INSTALLED": "1: the tests refuse to run against the source checkout (tests/run sets it)",
    "KVSTORE_SOURCE_DIR": "the checkout the tests were taken from (tests/run sets it)",
    "KVSTORE_MOONCAKE_ALIAS": "1: `import mooncake.store` / `mooncake.engine` give kvstore's "
    "Mooncake-compatible layer (an engine's built-in Mooncake integration then runs on kvstore)",
}
# Renamed settings: the error says what to use instead.
RENAMED = {
    "KVSTORE_PROTOCOL": "KVSTORE_TRANSPORT",
    "KVSTORE_ENABLE_SHM": "KVSTORE_SHM_ENABLED",
    "KVSTORE_COPY_SLICE_SIZE": "KVSTORE_SHM_SLICE_SIZE and KVSTORE_LOCAL_SLICE_SIZE",
}


def known_variables() -> dict[str, str]:
    """Variable -> what it sets ("component.setting", or a description)."""
    from kvstore.config import COMPONENTS

    known: dict[str, str] = {}
    for component, cls in COMPONENTS.items():
        for info in cls.settings():
            known.setdefault(info.variable, f"{component}.{info.name}")
    known.update(OTHER_VARIABLES)
    return known


def check_environment(env: Mapping[str, str]) -> None:
    """Raises InvalidArgumentError naming the first KVSTORE_* variable that nothing reads, or whose value
    the component reading it refuses (every component is checked: a bad value fails any process early,
    not only the one that happens to read it)."""
    _check_names(env)
    from kvstore.config import COMPONENTS

    for cls in COMPONENTS.values():
        config = cls()
        config.apply_all(env, {})
        config.validate()


def _check_names(env: Mapping[str, str]) -> None:
    known = known_variables()
    for name in sorted(env):
        if not name.startswith("KVSTORE_") or name in known:
            continue
        hint = ""
        if name in RENAMED:
            hint = f"; it is now {RENAMED[name]}"
        else:
            close = difflib.get_close_matches(name, list(known), n=1)
            if close:
                hint = f"; did you mean {close[0]}?"
        raise InvalidArgumentError(
            f"unknown setting in the environment: {name}{hint} (`kvstore config --variables` lists them all)"
        )
