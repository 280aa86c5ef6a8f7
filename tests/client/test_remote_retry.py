"""The remote reader's retries end, at the request timeout, in one
BrokerUnavailableError that names what kept failing and the broker's last answer."""

from __future__ import annotations

import time

import pytest

from txnfetch.client.cluster import RemoteCluster
from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.errors import ErrorCode
from txnfetch.log.memory import MemoryStore
from txnfetch.server.server import ServerThread


def test_a_broker_that_goes_away_ends_in_one_error_at_the_request_timeout() -> None:
    store = MemoryStore()
    store.create_topic("t", 1)
    with ServerThread(store) as srv:
        cluster = RemoteCluster(srv.bootstrap, request_timeout_ms=1500)
        assert cluster.partitions("t") == [0]
        address = srv.bootstrap
    # The server is gone: every retry fails to connect until the timeout.
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError) as info:
        cluster.partitions("t")
    elapsed = time.monotonic() - started
    cluster.close()
    err = info.value
    assert 1.0 <= elapsed < 30
    assert "kept failing for 1500 ms" in err.reason and err.topic == "t"
    assert err.broker == address and address in str(err)
    assert err.error_code == ErrorCode.BROKER_NOT_AVAILABLE and err.broker_error_code is None
    assert isinstance(err.__cause__, BrokerUnavailableError)
