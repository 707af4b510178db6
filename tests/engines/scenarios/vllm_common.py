"""What the scenarios that drive vLLM's real Scheduler and worker-side connectors by hand share: the
connector's VllmConfig, the scheduler and block hasher as vLLM's engine core builds them, the model runner's
output around a simulated forward, and the loop that steps a request to its end.

Imported by plain `import vllm_common` (a scenario runs as `python scenarios/<name>.py`, so this folder is
sys.path[0]); it imports vLLM, so scenarios that load vLLM only in main() must not import it at the top.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace

from vllm.config import CacheConfig, KVTransferConfig, ModelConfig, ParallelConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from kvstore.errors import ObjectBusyError

SAMPLED_TOKEN = 7  # the token every simulated step samples


def connector_config(
    model: str,
    block: int,
    num_blocks: int | None,
    *,
    extra: dict[str, object] | None = None,
    on_load_failure: str = "fail",
    tp: int | None = None,
    rank: int = 0,
) -> VllmConfig:
    """A VllmConfig with the kvstore connector (its master from KVSTORE_MASTER, the default namespace unless
    `extra` names one) and `num_blocks` KV blocks (None: vLLM's own count); `tp` set gives it TP rank
    `rank` of that size."""
    parallel = {} if tp is None else {"parallel_config": ParallelConfig(tensor_parallel_size=tp, rank=rank)}
    config = VllmConfig(
        model_config=ModelConfig(model=model, skip_tokenizer_init=True, dtype="float32", seed=0),
        cache_config=CacheConfig(block_size=block),
        kv_transfer_config=KVTransferConfig(
            kv_connector="KVStoreConnector",
            kv_connector_module_path="kvstore.integrations.vllm",
            kv_role="kv_both",
            kv_connector_extra_config=dict(extra or {}),
            kv_load_failure_policy=on_load_failure,
        ),
        **parallel,
    )
    if num_blocks is not None:
        config.cache_config.num_gpu_blocks = num_blocks
    return config


def request_block_hasher(config: VllmConfig, block: int) -> Callable:
    """The request block hasher, after setting vLLM's none-hash as its engine core does."""
    hash_fn = get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    return get_request_block_hasher(block, hash_fn)


def real_scheduler(config: VllmConfig, kv_config: object, block: int) -> Scheduler:
    """vLLM's Scheduler (it builds the scheduler-side connector itself)."""
    return Scheduler(
        vllm_config=config,
        kv_cache_config=kv_config,
        structured_output_manager=StructuredOutputManager(config),
        block_size=block,
        log_stats=True,
    )


def record_matches(scheduler: Scheduler) -> list[int]:
    """A list that gets the external-hit token count of every get_num_new_matched_tokens the scheduler
    makes from now on."""
    matched: list[int] = []
    lookup = scheduler.connector.get_num_new_matched_tokens

    def recorded(request: Request, computed: int) -> tuple[int | None, bool]:
        out = lookup(request, computed)
        matched.append(out[0] or 0)
        return out

    scheduler.connector.get_num_new_matched_tokens = recorded
    return matched


def add_request(
    scheduler: Scheduler, request_id: str, prompt: list[int], max_tokens: int, block_hasher: Callable
) -> None:
    request = Request(
        request_id, prompt, SamplingParams(max_tokens=max_tokens), None, block_hasher=block_hasher
    )
    scheduler.add_request(request)


def step_until_done(scheduler: Scheduler, step: Callable[[], bool], timeout_s: float) -> None:
    """Calls `step` until the scheduler has nothing left; `step` says whether it did anything (if not, only
    saves are pending: wait a little, as vLLM's busy loop does)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not scheduler.has_requests() and not scheduler.finished_req_ids:
            return
        if not step():
            time.sleep(0.005)
    raise RuntimeError("the request did not finish")


def runner_output(req_ids: list[str], connector_output: KVConnectorOutput) -> ModelRunnerOutput:
    """The model runner's output of a step that sampled one token for each of `req_ids`."""
    return ModelRunnerOutput(
        req_ids=req_ids,
        req_id_to_index={r: i for i, r in enumerate(req_ids)},
        sampled_token_ids=[[SAMPLED_TOKEN] for _ in req_ids],
        kv_connector_output=connector_output,
    )


def worker_output(worker: object, finished_req_ids: set[str], req_ids: list[str]) -> ModelRunnerOutput:
    """A worker's step output after its save: what get_finished and the load errors report (its metadata
    is cleared)."""
    sending, receiving = worker.get_finished(finished_req_ids)
    errors = worker.get_block_ids_with_load_errors()
    worker.clear_connector_metadata()
    return runner_output(
        req_ids,
        KVConnectorOutput(finished_sending=sending, finished_recving=receiving, invalid_block_ids=errors),
    )


def computed_tokens(out: object, req_id: str) -> int:
    """How many tokens of `req_id` were computed before this step (new or running request)."""
    for new in out.scheduled_new_reqs:
        if new.req_id == req_id:
            return new.num_computed_tokens
    cached = out.scheduled_cached_reqs
    return cached.num_computed_tokens[cached.req_ids.index(req_id)]


def track_group_blocks(out: object, block_ids: dict[str, list[list[int]]]) -> None:
    """Adds the blocks this step gave each request, per KV cache group, to `block_ids`."""
    for new in out.scheduled_new_reqs:
        block_ids[new.req_id] = [list(ids) for ids in new.block_ids]
    cached = out.scheduled_cached_reqs
    for i, rid in enumerate(cached.req_ids):
        for g, ids in enumerate(cached.new_block_ids[i] or []):
            block_ids[rid][g].extend(ids)


def remove_after_lookup(scheduler: Scheduler, store: object, key: str) -> Callable[[], None]:
    """A hook that removes `key` once, right after the scheduler's lookup credited it (before its load
    runs), waiting out an earlier read's lease."""

    def remove_once() -> None:
        if not (scheduler.connector.scheduler_side.requests and store.batch_exists([key])[0]):
            return
        until = time.monotonic() + 60
        while True:
            try:
                return store.remove(key)
            except ObjectBusyError:  # an earlier read's lease has not lapsed yet
                if time.monotonic() > until:
                    raise
                time.sleep(0.2)

    return remove_once


class CachedBlockPool:
    """A block pool holding exactly the blocks whose index is in `present` (vLLM's managers ask it only
    for cached blocks by hash, the null block and the hash block size)."""

    def __init__(self, present: set[int], block: int) -> None:
        self.present = present
        self.null_block = SimpleNamespace(block_id=0, is_null=True)
        self.hash_block_size = block

    def get_cached_block(self, block_hash: bytes, group_ids: list[int]) -> list | None:
        index = int.from_bytes(block_hash, "little")
        return [SimpleNamespace(block_id=index + 1)] * len(group_ids) if index in self.present else None


def transfer_output(results: object, invalid_block_ids: set[int]) -> KVConnectorOutput:
    """The connector output of a step from the worker's get_transfer_results (failed loads included)."""
    return KVConnectorOutput(
        finished_sending=results.finished_sending or None,
        finished_recving=results.finished_recving or None,
        invalid_block_ids=invalid_block_ids,
        failed_recving=results.failed_recving,
    )
