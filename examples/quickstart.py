"""kvstore in one process: an embedded master and segment, put/get, and a zero-copy batch with numpy.

python examples/quickstart.py
"""

from __future__ import annotations

import numpy as np

from kvstore import MISS, ObjectExistsError, Store

with Store.embedded(segment_size="256MiB") as store:
    # Bytes in, bytes out. A miss is None, never an exception.
    store.put("greeting", b"hello, kv cache")
    print(store.get("greeting"), store.get("absent"))

    # The same key with different bytes is refused; identical bytes are accepted (keys name content).
    try:
        store.put("greeting", b"something else")
    except ObjectExistsError as exc:
        print("refused:", exc)

    # Zero-copy batch: register the buffers once, then whole batches move with no copies.
    blocks, block_bytes = 8, 256 << 10
    source = np.random.default_rng(0).integers(0, 256, (blocks, block_bytes), dtype=np.uint8)
    dest = np.zeros_like(source)
    store.register_buffer(source)
    store.register_buffer(dest)
    keys = [f"layer0/block{i}" for i in range(blocks)]
    print("put:", store.batch_put_from(keys, list(source)))  # 0 per stored key
    results = store.batch_get_into([*keys, "missing"], [*dest, dest[0]])
    print("get:", results[:3], "...", "missing ->", "MISS" if results[-1] == MISS else results[-1])
    assert np.array_equal(source, dest)

    # One key, several buffers (e.g. the K and V halves of a block).
    k, v = np.full(1024, 1, np.uint8), np.full(1024, 2, np.uint8)
    store.batch_put_from_multi_buffers(["kv/0"], [[k, v]])
    k2, v2 = np.zeros_like(k), np.zeros_like(v)
    store.batch_get_into_multi_buffers(["kv/0"], [[k2, v2]])
    assert (k2 == 1).all() and (v2 == 2).all()
    print("exists:", store.batch_exists(["kv/0", "nope"]), "objects:", store.stats()["master"]["objects"])
