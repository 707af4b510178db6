"""Real vLLM scheduler + worker-side connector for a hybrid Mamba layout: KV cache group 0 is full attention,
group 1 a Mamba state group (MambaSpec, "align" mode: vLLM's default with prefix caching), with vLLM's own
spec classes, HybridKVCacheCoordinator and MambaManager. Against one kvstore (KVSTORE_MASTER):

- instance A runs a 6-block + 5-token prompt. vLLM splits the prefill at the last block boundary and
  offers the state block of boundary 96 (block 5) as cached; the connector saves exactly the offered state
  blocks that sit on a whole-block boundary, before wait_for_save returns (the scenario overwrites them at
  once, as vLLM may reuse them), and each saved state is the state of its boundary;
- a fresh instance B shares A's first 6 blocks: credited exactly what vLLM's own prefix cache gives A for
  the same prompt (96), it loads full-attention blocks 0..5 and the state of block 5 only, into the block
  vLLM allocated for it, byte-exact; vLLM's null state blocks stay untouched;
- a fresh instance C shares A's first 4 blocks only: every full-attention block is in the store but no
  state at boundary 64, so the connector credits nothing (vLLM's own cache on A gives 0 too);
- a fresh instance D shares 6 blocks, but the state object is removed after its lookup: the load fails,
  is reported for the request (failed_recving) and vLLM recomputes it (policy "recompute").

The model forward is the one thing simulated, as vLLM's align mode places it: a step computing tokens up to
`end` writes the state of the prefix [0, end) into the request's block cdiv(end, block) - 1 of the state
group (mamba_utils: the running state block), and each token's slot of the full-attention layer.
"""

from __future__ import annotations

import hashlib
import json

import torch
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
from vllm.v1.request import Request
from vllm_common import (
    add_request,
    computed_tokens,
    connector_config,
    real_scheduler,
    remove_after_lookup,
    request_block_hasher,
    runner_output,
    step_until_done,
    track_group_blocks,
    transfer_output,
)
from vllm_scheduler import HEAD, HEADS, tiny_model_dir

BLOCK = 16
LAYERS = ["model.layers.0.self_attn.attn", "model.layers.1.mixer"]  # group 0 (full), group 1 (state)
NUM_BLOCKS = 64
CONV, SSM = (8, 3), (2, 4, 4)  # a rank's conv and SSM state shapes (float32)
STATE_BYTES = 4 * (CONV[0] * CONV[1] + SSM[0] * SSM[1] * SSM[2])
UNWRITTEN = -7  # the state tensor's bytes before anything is written


def state_of(tokens: list[int]) -> torch.Tensor:
    """The simulated recurrent state after `tokens` (a function of the whole prefix)."""
    seed = hashlib.sha256(repr(tokens).encode()).digest()
    raw = (seed * (STATE_BYTES // len(seed) + 1))[:STATE_BYTES]
    return torch.frombuffer(bytearray(raw), dtype=torch.int8).view(1, 1, STATE_BYTES)


def full_and_state_groups(kv_heads: int) -> KVCacheConfig:
    """The KV cache config of a rank with `kv_heads` KV heads: group 0 full attention, group 1 the Mamba
    state (align mode)."""
    full = FullAttentionSpec(block_size=BLOCK, num_kv_heads=kv_heads, head_size=HEAD, dtype=torch.float32)
    mamba = MambaSpec(
        block_size=BLOCK,
        shapes=(CONV, SSM),
        dtypes=(torch.float32, torch.float32),
        mamba_cache_mode="align",
    )
    groups = [KVCacheGroupSpec([LAYERS[0]], full), KVCacheGroupSpec([LAYERS[1]], mamba)]
    return KVCacheConfig(num_blocks=NUM_BLOCKS, kv_cache_tensors=[], kv_cache_groups=groups)


class Instance:
    def __init__(self, model: str, on_load_failure: str = "fail") -> None:
        config = connector_config(model, BLOCK, NUM_BLOCKS, on_load_failure=on_load_failure)
        config.cache_config.mamba_cache_mode = "align"
        self.block_hasher = request_block_hasher(config, BLOCK)
        kv_config = full_and_state_groups(HEADS)
        self.scheduler = real_scheduler(config, kv_config, BLOCK)
        self.worker = KVConnectorFactory.create_connector(config, KVConnectorRole.WORKER, kv_config)
        # vLLM's views: attention [blocks, kv heads, tokens, K|V]; a state layer [blocks, 1, 1, state bytes].
        self.caches = {
            LAYERS[0]: torch.full((NUM_BLOCKS, HEADS, BLOCK, 2 * HEAD), float("nan")),
            LAYERS[1]: torch.full((NUM_BLOCKS, 1, 1, STATE_BYTES), UNWRITTEN, dtype=torch.int8),
        }
        self.worker.register_kv_caches(self.caches)
        self._record_lookups()
        self.block_ids: dict[str, list[list[int]]] = {}
        self.tokens: dict[str, list[int]] = {}
        self.loads: list[tuple[int, int]] = []  # (group, block id) of every object loaded
        self.load_targets: dict[str, list[int]] = {}  # request -> state blocks its load writes
        self.loaded_states: dict[str, list[bytes]] = {}  # ... and their bytes when the load ended
        self.failed_recving: set[str] = set()
        self.state_saved: dict[int, bytes] = {}  # state block index -> its bytes when saved
        self.state_missing_after_save = 0
        self.before_load = lambda: None

    def _record_lookups(self) -> None:
        connector = self.scheduler.connector
        lookup, build = connector.get_num_new_matched_tokens, connector.build_connector_meta
        self.matched: list[int] = []
        self.local: list[int] = []  # vLLM's own prefix-cache hit at each lookup
        self.offers: list[tuple[int, int]] = []  # (group, boundary) vLLM offered as cached states

        def recorded(request: Request, computed: int) -> tuple[int | None, bool]:
            out = lookup(request, computed)
            self.local.append(computed)
            self.matched.append(out[0] or 0)
            return out

        def offered(scheduler_output):  # the offers never reach the workers: read them here
            state = scheduler_output.kv_connector_block_state
            for entries in (state.boundary_state_offloads if state else {}).values():
                self.offers += [(group, boundary) for group, _, boundary in entries]
            return build(scheduler_output)

        connector.get_num_new_matched_tokens = recorded
        connector.build_connector_meta = offered

    def run(self, request_id: str, prompt: list[int]) -> None:
        self.tokens[request_id] = list(prompt)
        add_request(self.scheduler, request_id, prompt, 2, self.block_hasher)
        step_until_done(self.scheduler, self.step, 60)

    def step(self) -> bool:
        out = self.scheduler.schedule()
        meta = out.kv_connector_metadata
        for move in meta.loads + meta.async_loads:
            self.loads += list(zip(move.groups, move.block_ids, strict=True))
            self.load_targets[move.req_id] = [
                b for g, b in zip(move.groups, move.block_ids, strict=True) if g == 1
            ]
        self.worker.bind_connector_metadata(meta)
        self.before_load()
        self.worker.start_load_kv(None)
        track_group_blocks(out, self.block_ids)
        for new in out.scheduled_new_reqs:
            self.tokens[new.req_id] = list(new.prompt_token_ids)
        self.worker.wait_for_layer_load(LAYERS[0])
        sampled = []
        for req_id, count in out.num_scheduled_tokens.items():
            start = computed_tokens(out, req_id)
            self.compute(req_id, start, start + count)
            if start + count >= len(self.tokens[req_id]):  # past the prompt: a token is sampled
                sampled.append(req_id)
        self.worker.wait_for_save()
        self.reuse_saved_state_blocks(meta)
        results = self.worker.get_transfer_results(out.finished_req_ids)
        for rid in results.finished_recving or ():
            self.loaded_states[rid] = [
                self.caches[LAYERS[1]][b].numpy().tobytes() for b in self.load_targets.get(rid, [])
            ]
        self.failed_recving |= results.failed_recving
        errors = self.worker.get_block_ids_with_load_errors()
        self.worker.clear_connector_metadata()
        ids = list(out.num_scheduled_tokens)
        for rid in sampled:
            self.tokens[rid].append(7)
        result = runner_output(ids, transfer_output(results, errors))
        self.scheduler.update_from_output(out, result)
        return bool(ids) or bool(results.finished_recving)

    def compute(self, req_id: str, start: int, end: int) -> None:
        tokens, (full_ids, state_ids) = self.tokens[req_id], self.block_ids[req_id]
        for pos in range(start, min(end, len(tokens))):
            self.caches[LAYERS[0]][full_ids[pos // BLOCK], :, pos % BLOCK, :] = tokens[pos] * 1000 + pos
        running = state_ids[(end + BLOCK - 1) // BLOCK - 1]
        assert running != 0, "a state landed in the null block"
        self.caches[LAYERS[1]][running] = state_of(tokens[:end])

    def reuse_saved_state_blocks(self, meta) -> None:
        """As vLLM may once wait_for_save returned: hand the saved state blocks to another request."""
        store = self.worker.link.get()
        names, suffix = self.worker.names, self.worker.groups.suffix(1)
        for move in meta.saves:
            for seq, digest, group, block_id in zip(
                move.seqs, move.digests, move.groups, move.block_ids, strict=True
            ):
                if group != 1:
                    continue
                key = names.key(seq, digest, group, 0, self.worker.groups.members(group), suffix)
                self.state_missing_after_save += not store.batch_exists([key])[0]
                index = self.block_ids[move.req_id][1].index(block_id)
                self.state_saved[index] = self.caches[LAYERS[1]][block_id].numpy().tobytes()
                self.caches[LAYERS[1]][block_id].fill_(UNWRITTEN - 1)


def main() -> None:
    model = tiny_model_dir()
    prompt_a = [(i * 7 + 3) % 500 + 5 for i in range(6 * BLOCK + 5)]
    prompt_b = prompt_a[: 6 * BLOCK] + [(i * 11 + 1) % 500 + 5 for i in range(BLOCK + 3)]
    prompt_c = prompt_a[: 4 * BLOCK] + [(i * 13 + 2) % 500 + 5 for i in range(2 * BLOCK + 3)]
    prompt_d = prompt_a[: 6 * BLOCK] + [(i * 17 + 4) % 500 + 5 for i in range(BLOCK + 3)]
    a = Instance(model)
    a.run("a", prompt_a)
    a_ids = a.block_ids["a"]
    expected_full = {i: a.caches[LAYERS[0]][a_ids[0][i]].numpy().tobytes() for i in range(6)}
    out: dict = {
        "a_matched": a.matched,
        "a_offers": sorted(set(a.offers)),
        "a_state_saved": sorted(a.state_saved),
        "a_state_missing_after_save": a.state_missing_after_save,
        "a_states_are_their_boundaries": all(
            raw == state_of(prompt_a[: (i + 1) * BLOCK]).numpy().tobytes() for i, raw in a.state_saved.items()
        ),
    }
    b = Instance(model)
    b.run("b", prompt_b)
    b_ids = b.block_ids["b"]
    state_block = b_ids[1][5]
    out.update(
        {
            "b_matched": b.matched,
            "b_loads": sorted((g, b_ids[g].index(bid)) for g, bid in b.loads),
            "b_state_nulls": [b_ids[1][i] == 0 for i in range(5)],
            "b_full_equal": all(
                b.caches[LAYERS[0]][b_ids[0][i]].numpy().tobytes() == expected_full[i] for i in range(6)
            ),
            "b_state_target_is_block_5": b.load_targets.get("b") == [state_block],
            "b_state_equal": b.loaded_states.get("b") == [state_of(prompt_b[: 6 * BLOCK]).numpy().tobytes()],
            "b_null_untouched": bool((b.caches[LAYERS[1]][0] == UNWRITTEN).all()),
            "b_failed_recving": sorted(b.failed_recving),
        }
    )

    c = Instance(model)
    c.run("c", prompt_c)
    out.update({"c_matched": c.matched, "c_loads": len(c.loads)})

    d = Instance(model, on_load_failure="recompute")
    seqs, digests = d.worker.names.prompt(prompt_d)
    members = d.worker.groups.members(1)
    doomed = d.worker.names.key(seqs[5], digests[5], 1, 0, members, d.worker.groups.suffix(1))
    d.before_load = remove_after_lookup(d.scheduler, d.worker.link.get(), doomed)
    d.run("d", prompt_d)
    out.update(
        {
            "d_matched": d.matched,
            "d_failed_recving": sorted(d.failed_recving),
            "d_unfinished": d.scheduler.get_num_unfinished_requests(),
        }
    )
    # vLLM's own prefix cache for the same prompts, on the instance that ran A (last: its connector saves
    # these prompts' blocks too).
    a.run("b-local", prompt_b)
    a.run("c-local", prompt_c)
    out["local_hits"] = a.local[1:]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
