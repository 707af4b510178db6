"""A block stored through the real vLLM connector is a hit, in `kvstore index`, for an instance that never
held it (issue 40, item 3), from the master's KV events alone: the connector keys blocks by the KV-events
sequence hash under its namespace, the master's events carry that hash and namespace, and the index credits
the store's blocks to every instance of the model. A fresh instance then loads exactly the credited prefix."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kvstore import Store
from kvstore.blocks import seq_of
from kvstore.integrations.vllm_keys import BlockNames, parallel_ranks
from kvstore.procs import kvstore_process
from tests.engines.conftest import load_scenario, run_scenario
from tests.helpers.store_credit import call, query, wait_subscribed

pytestmark = [pytest.mark.engines, pytest.mark.timeout(1800)]

MODEL = "tiny-llama"


def _scenario() -> Any:
    return load_scenario("vllm_index_credit")


def connector_namespace(namespace: str, block: int) -> str:
    """The namespace the vLLM connector's keys carry for a one-group model at TP=1 (its own naming code)."""
    single = SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1, rank=0)
    *_, stage = parallel_ranks(SimpleNamespace(parallel_config=single))
    named = seq_of(BlockNames(namespace, block, 1).key(1, "0" * 32, 0, 0, 1, stage))
    assert named is not None
    return named[0]


@pytest.fixture
def credited_store(tmp_path: Path) -> Iterator[tuple[str, str, Store]]:
    """An index, a master publishing its KV events and a node; the index follows the store under the
    connector's namespace and knows one instance ("cold", whose publisher never says a thing). Yields
    (index address, master address, a client)."""
    scenario = _scenario()
    namespace = connector_namespace(scenario.NAMESPACE, scenario.BLOCK)
    events = f"ipc://{tmp_path}/store-events"
    with ExitStack() as stack:
        _, ready = stack.enter_context(kvstore_process(["index", "--port", "0"]))
        index = ready.removeprefix("http://")
        _, ready = stack.enter_context(
            kvstore_process(["master", "--port", "0", "--kv-events-endpoint", events])
        )
        master = ready.split()[0]
        stack.enter_context(kvstore_process(["node", "--master", master, "--segment-size", "256MiB"]))
        base = {"modelname": MODEL, "block_size": scenario.BLOCK, "dp_rank": 0}
        cold = {**base, "endpoint": f"ipc://{tmp_path}/cold-events", "type": "vLLM", "instance_id": "cold"}
        assert call(index, "/register", cold)[0] == 200
        store_events = {
            **base,
            "endpoint": events,
            "type": "kvstore",
            "instance_id": "store",
            "namespace": namespace,
        }
        assert call(index, "/register", store_events)[0] == 200
        store = stack.enter_context(Store.connect(master))
        wait_subscribed(index, store, MODEL, scenario.BLOCK, namespace, "cold")
        yield index, master, store


def test_a_block_stored_through_vllm_is_credited_to_an_instance_that_never_held_it(
    engines_python: Path, credited_store: tuple[str, str, Store], tmp_path: Path
) -> None:
    index, master, _ = credited_store
    scenario = _scenario()
    block = scenario.BLOCK
    first = run_scenario(engines_python, "vllm_index_credit", master, tmp_path, args=["first"])
    assert first["num_cached_tokens"] == 0
    stored = scenario.FULL_BLOCKS * block
    row = query(index, MODEL, block, first["prompt"])["cold"]
    assert row == {"longest_matched": stored, "GPU": 0, "CPU": 0, "DISK": 0, "STORE": stored, "DP": {}}
    # The credit is what a fresh instance gets: it loads exactly those blocks and generates the same.
    second = run_scenario(engines_python, "vllm_index_credit", master, tmp_path, args=["second"])
    assert second["num_cached_tokens"] == stored and second["tokens"] == first["tokens"]
