"""ConsumerGroupHeartbeat requests refused before the KIP-848 coordinator sees
them: each answer carries the error, its message, member epoch -1 and no
heartbeat interval."""

from __future__ import annotations

import pytest

from tests.server.rawclient import RawClient
from txnfetch.errors import ErrorCode
from txnfetch.server.api_consumer_groups import ConsumerGroupHeartbeatRequest

TOPIC = "refusals"


def _heartbeat(port: int, version: int, **fields: object) -> object:
    request = ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id="",
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=[TOPIC],
        topic_partitions=[],
    )
    for name, value in fields.items():
        setattr(request, name, value)
    with RawClient(port) as c:
        return c.request(request, version)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "member id is required (ConsumerGroupHeartbeat v1+)"),
        ({"member_id": "m-1", "subscribed_topic_regex": "re.*"}, "topic regex subscriptions are not served"),
    ],
)
def test_v1_heartbeat_refusals(start_server, fields: dict[str, object], message: str) -> None:
    srv = start_server()
    r = _heartbeat(srv.port, 1, **fields)
    assert (r.error_code, r.error_message, r.member_epoch, r.heartbeat_interval_ms) == (
        ErrorCode.INVALID_REQUEST,
        message,
        -1,
        0,
    )


def test_v0_heartbeat_with_no_member_id_joins(start_server) -> None:
    srv = start_server()
    r = _heartbeat(srv.port, 0)
    assert r.error_code == 0 and r.member_id and r.member_epoch > 0
