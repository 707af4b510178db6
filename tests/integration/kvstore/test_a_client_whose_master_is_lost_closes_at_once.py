"""A client whose master is gone waits between heartbeats for news of the next leader, up to one heartbeat
interval; closing it must end that wait at once: `Store.close()` took up to a whole interval (and more,
the heartbeat thread's join waiting out the pause) while the heartbeat slept for news nobody would bring."""

from __future__ import annotations

import time

from kvstore import Store
from kvstore.config import MasterConfig
from kvstore.master import Master

INTERVAL = 4.0  # the master tells clients to beat this often: the longest a lost-master wait lasts
# The first beat fails at INTERVAL; the retries wait 0.01, 0.02, ... 2.56 s (5.11 s in all), then INTERVAL:
# at INTERVAL + 6.5 s the heartbeat is ~1.4 s into that last wait, ~2.6 s from its end.
LOST_FOR = INTERVAL + 6.5


def test_a_client_whose_master_is_lost_closes_at_once() -> None:
    master = Master.start_in_thread(
        MasterConfig.load(port=0, heartbeat_interval=INTERVAL, client_ttl=60, busy_poll_us=0)
    )
    store = Store.connect(master=master.address)
    try:
        master.stop()
        time.sleep(LOST_FOR)
    finally:
        started = time.monotonic()
        store.close()
        took = time.monotonic() - started
    assert took < 1.0, f"closing took {took:.2f} s"
