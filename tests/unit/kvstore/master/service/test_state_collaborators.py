"""MasterState is named collaborators, not one object assembled by inheritance (issue 41 step 1): each job
is a class of its own given the tables and jobs it works with, and the function modules and the wire go
through the owner of what they use instead of reaching through the state."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import kvstore.master as master_package
from kvstore.config import MasterConfig
from kvstore.master.service.access import Access
from kvstore.master.service.handlers import Handlers
from kvstore.master.service.membership import Membership
from kvstore.master.service.puts import Puts
from kvstore.master.service.removal import Removal
from kvstore.master.service.restore import Restore
from kvstore.master.service.roles import Roles
from kvstore.master.service.state import MasterState
from kvstore.master.service.state_core import StateCore
from kvstore.master.service.suspicion import Suspicion

JOBS = (StateCore, Membership, Suspicion, Roles, Puts, Removal, Access, Restore)
# Modules that are given the state or its parts (the count of reach-throughs: 25 before).
FUNCTION_MODULES = (
    "service/handlers.py",
    "service/node_work.py",
    "service/reads.py",
    "service/restore.py",
    "wire/metrics.py",
    "wire/server.py",
    "wire/status.py",
)
REACH_THROUGH = re.compile(r"\bstate\.([a-z_]+)\.([a-z_]+)")


def test_no_job_inherits_another_and_none_is_given_the_whole_state() -> None:
    assert MasterState.__mro__ == (MasterState, object)
    for job in JOBS:
        assert job.__mro__ == (job, object), job
        hints = inspect.signature(job.__init__).parameters.values()
        assert all("MasterState" not in str(p.annotation) for p in hints), job


def test_each_job_keeps_its_own_tables_and_callers_ask_it() -> None:
    state = MasterState(MasterConfig.load())
    state.members.register_client("c0", "h0")
    state.members.register_client("c1", "h1", node_id="n1")
    assert set(state.members.clients) == {"c0", "c1"} and state.roles is state.members.roles
    assert not hasattr(state.roles, "_by_node") and not hasattr(state.members, "admins")
    assert state.members._by_node == {"n1": "c1"}
    # Dropping a client reaches the roles' and suspicion's tables through their owners.
    state.roles.admins.add("c1")
    state.members.drop_client("c1")
    assert "c1" not in state.roles.admins and state.members._by_node == {}
    handlers = Handlers(state)
    assert handlers.fences is state.space.fences and handlers.holds is state.space.holds


def test_the_state_runs_only_what_spans_its_jobs() -> None:
    """No second route to a job's operation or a table's figure: the state's own methods are the ones
    that span jobs, and capacity, used and segments have one owner (the memory space)."""
    own = {name for name, _ in inspect.getmembers(MasterState, callable) if not name.startswith("_")}
    assert own == {"credit_stall", "expire", "stats"}
    state = MasterState(MasterConfig.load())
    jobs = (state.members, state.roles, state.suspicion, state.puts, state.access, state.removal)
    for name, value in vars(state).items():
        assert not (inspect.ismethod(value) and value.__self__ in jobs), name
    for figure in ("capacity", "used", "segments"):
        assert not any(hasattr(owner, figure) for owner in (state, state.core, state.members)), figure
    assert not any(hasattr(state, book) for book in ("fences", "holds", "polls"))  # the space's: state.space
    # One route to a registered client: Membership.client (the roles and the puts are given it).
    assert not hasattr(state.members, "check_client")
    assert state.roles._client == state.members.client
    # A segment's mount is declared once (the MountSegment request); membership takes it whole rather
    # than repeating the memory space's parameters.
    assert list(inspect.signature(Membership.mount_segment).parameters) == ["self", "r"]


def test_no_function_module_reaches_through_the_state() -> None:
    root = Path(master_package.__file__).parent
    found = []
    for name in FUNCTION_MODULES:
        for lineno, line in enumerate((root / name).read_text().splitlines(), 1):
            found += [f"{name}:{lineno}: {match.group(0)}" for match in REACH_THROUGH.finditer(line)]
    assert found == []
