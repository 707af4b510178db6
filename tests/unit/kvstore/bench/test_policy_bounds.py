from __future__ import annotations

import random

import numpy as np

from kvstore.bench import policy_bounds as pb
from kvstore.bench.trace import simulate


def test_optimum_keeps_the_block_used_next() -> None:
    # capacity 2: when 3 arrives, LRU drops 1 (used next); Belady drops a never-used block
    trace = [[1], [2], [3], [1]]
    assert simulate(trace, 2, "lru").hit_rate == 0.0
    assert pb.optimum(trace, 2) == 0.25


def test_dead_block_oracle_never_below_lru() -> None:
    rnd = random.Random(7)
    for _ in range(20):
        trace = [[0] + [rnd.randrange(30) for _ in range(rnd.randrange(1, 6))] for _ in range(60)]
        for capacity in (2, 5, 12):
            assert pb.dead_block_oracle(trace, capacity) >= simulate(trace, capacity, "lru").hit_rate


def test_dead_block_oracle_drops_one_off_blocks() -> None:
    # 9 and 8 are never used again: the oracle keeps 1 and 2 where LRU loses them
    trace = [[1, 2], [9], [8], [1, 2]]
    assert simulate(trace, 2, "lru").hit_rate == 0.0
    assert pb.dead_block_oracle(trace, 2) == 2 / 6


def test_continuations_follow_turns_not_the_shared_first_block() -> None:
    trace = [[0, 1, 2, 3], [0, 1, 2, 4, 5], [0, 9], [0, 1, 2, 4, 6, 7], [0, 7]]
    turn, continued = pb.continuations(trace)
    # 1 continues 0 (all of 0 but its partial last block), 3 continues 1; 2 and 4 share only block 0
    assert turn == [1, 2, 1, 3, 1]
    assert continued == [True, True, False, False, False]
    odds = pb.continuation_odds(trace)
    assert odds["1"] == (3, 1 / 3) and odds["2"] == (1, 1.0) and odds["3"] == (1, 0.0)


def test_fitted_scores_learn_that_last_blocks_die() -> None:
    # a conversation growing turn by turn: every request's last block is never used again
    trace = [[0, *range(1, n), 1000 + n] for n in range(2, 40)]
    classes = pb._block_classes(trace)
    scores = pb._reuse_scores(pb._reuse_histogram(trace, classes, bucket=4), horizon=10)
    assert np.all(scores[0] == 0)  # class 0: last block of a request
    assert scores[1:].max() > 0.5
    assert 0 < pb.fitted_ranking(trace, 20) <= 1
