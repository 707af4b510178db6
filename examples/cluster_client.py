"""A client of a running cluster (see examples/cluster.md): stores and reads back a few blocks.

python examples/cluster_client.py MASTER_HOST:PORT
"""

from __future__ import annotations

import sys

import numpy as np

from kvstore import Store


def main(master: str) -> None:
    # segment_size=0: this client only reads and writes; the nodes hold the data.
    with Store.connect(master, segment_size=0) as store:
        blocks = np.random.default_rng(1).integers(0, 256, (4, 1 << 20), dtype=np.uint8)
        keys = [f"demo/block{i}" for i in range(len(blocks))]
        print("put (2 replicas where two hosts exist):", store.batch_put_from(keys, list(blocks), replicas=1))
        out = np.zeros_like(blocks)
        print("get:", store.batch_get_into(keys, list(out)))
        assert np.array_equal(out, blocks)
        print(store.stats()["master"])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051")
