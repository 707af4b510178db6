"""Every `KVSTORE_*` variable the project reads, and the check that the environment holds no other
(a misspelt or renamed variable would otherwise be silently ignored)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from kvstore.errors import InvalidArgumentError

# Variables that are not component settings: build switches, process plumbing, test knobs.
OTHER_VARIABLES = {
    "KVSTORE_BUILD_JOBS": "N: `pip install .` runs at most N compiles and links at once",
    "KVSTORE_DEBUG_BUILD": "1: build the C++ extensions with -O0 -g",
    "KVSTORE_BUILD_PROGRESS": "0: `pip install .` does not name each file it compiles on the terminal",
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


def known_variables(blocks: bool = True) -> dict[str, str]:
    """Variable -> what it sets ("component.setting", or a description). `blocks` False leaves out the
    settings of nested blocks (the transports' options: listing them loads the engine's extension)."""
    from kvstore.config import COMPONENTS

    known: dict[str, str] = {}
    for component, cls in COMPONENTS.items():
        for info in cls.settings() if blocks else cls.field_settings():
            known.setdefault(info.variable, f"{component}.{info.name}")
    known.update(OTHER_VARIABLES)
    return known


def check_environment(env: Mapping[str, str]) -> None:
    """Raises InvalidArgumentError naming the first KVSTORE_* variable that nothing reads, or whose value
    the component reading it refuses (every component is checked: a bad value fails any process early,
    not only the one that happens to read it). Each component is handed its own variables and those no
    component's fields name (transport options): an environment that names no transport option never
    loads the engine's extension (a master's)."""
    from kvstore.config import COMPONENTS

    names = {n for n in env if n.startswith("KVSTORE_")}
    fields = known_variables(blocks=False)
    blocks = names - fields.keys()
    _check_names(names, known_variables() if blocks else fields)
    for cls in COMPONENTS.values():
        own = {i.variable for i in cls.field_settings()}
        config = cls()
        config.apply_all({n: env[n] for n in names if n in own or n in blocks}, {})
        config.validate()


def _check_names(names: set[str], known: Mapping[str, str]) -> None:
    for name in sorted(names):
        if name in known:
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
