"""The C++ layers point down only: bind -> engine -> transport -> core -> cuda -> common (meta and tools
aside). Transports never include engine or binding headers, nor each other; the engine and the binding
never include a concrete transport (they learn transports from transport/registration.h); what several
transports share lives in transport/path/.

    python tests/check_includes.py CSRC_DIR      exit 1 and one line per offending #include
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# Layer -> the top-level folders its files may include.
ALLOWED = {
    "common": {"common"},
    "cuda": {
        "common",
        "cuda",
    },  # the run-time-loaded CUDA driver: below core, which pins and (later) moves GPU memory
    "core": {"common", "cuda", "core"},
    "topology": {"common", "topology"},  # the host's NICs, GPUs and NUMA nodes, read from sysfs
    "transport": {"common", "cuda", "core", "topology", "transport"},
    "engine": {"common", "cuda", "core", "topology", "transport", "engine"},
    "bind": {"common", "cuda", "core", "topology", "transport", "engine", "bind", "meta"},
    "meta": {"common", "meta"},  # the master's tables and the offset allocator under them; no data plane
    "tools": {"common", "core", "topology", "transport", "bind", "tools"},
}
# Headers of transport/ that name no concrete transport: the interface and the registration list.
TRANSPORT_API = {
    "transport/transport.h",
    "transport/registration.h",
    "transport/copy.h",
    "transport/same_host.h",
    "transport/same_host_channel.h",
}
# Folders of transport/ that are no transport but what several share (path planning, MultiPathChannel).
TRANSPORT_SHARED = {"path"}


def violations(csrc: Path) -> list[str]:
    found = []
    for path in sorted(csrc.rglob("*")):
        if path.suffix not in (".h", ".cpp", ".def"):
            continue
        rel = path.relative_to(csrc)
        layer = rel.parts[0]
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            target = match.group(1)
            top = target.split("/")[0]
            where = f"{rel}:{number}: includes {target}"
            if layer not in ALLOWED:
                found.append(f"{where} (unknown layer {layer!r}: add it to tests/check_includes.py)")
            elif top not in ALLOWED[layer]:
                found.append(f"{where} ({layer} may include only {', '.join(sorted(ALLOWED[layer]))})")
            elif layer == "tools":
                continue  # bench/test support: it may reach a transport's wire codec to fuzz it
            elif (
                top == "transport"
                and target not in TRANSPORT_API
                and target != "transport/transports.def"
                and target.split("/")[1] not in TRANSPORT_SHARED
            ):
                own = rel.parts[1] if layer == "transport" and len(rel.parts) > 2 else None
                if target.split("/")[1] != own:
                    found.append(f"{where} (only a transport's own files and the registration list name it)")
    return found


def main() -> int:
    csrc = Path(sys.argv[1] if len(sys.argv) > 1 else "csrc")
    found = violations(csrc)
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} include(s) against the layer rules (see tests/check_includes.py)")
        return 1
    print(f"C++ include directions: ok ({csrc})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
