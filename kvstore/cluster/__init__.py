"""A process's membership of the cluster, shared by the client and the storage node: its session (an
engine, a client id registered with the master, heartbeats, peers), the RPC client that reaches the master,
and the locator that finds the leader of an HA group."""
