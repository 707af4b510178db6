"""The cache-aware routing index (`kvstore index`): which prefix blocks each engine instance holds, on
which medium (GPU, CPU, disk) and data-parallel rank, fed by the engines' KV events (vLLM's and SGLang's
ZMQ publishers, and the standardized RFC #1527 events), and queried over Mooncake Conductor's HTTP API
(`/register`, `/unregister`, `/query`, `/query_by_hash`) so a router written for Conductor works unchanged.

Layers: hashing (the contract's rolling hash) and table (the index itself) know nothing of the wire;
events decodes publishers' batches; subscriptions owns the ZMQ sockets and is the table's one writer;
http_api serves the queries; process runs them together.
"""
