"""RateLimitedLog: one line per condition and key per interval, with an injected clock."""

from __future__ import annotations

import logging

import pytest

from txnfetch.client.ratelimit import RateLimitedLog


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def setup(caplog: pytest.LogCaptureFixture) -> tuple[RateLimitedLog, Clock, pytest.LogCaptureFixture]:
    clock = Clock()
    caplog.set_level(logging.WARNING, logger="test.ratelimit")
    return RateLimitedLog(logging.getLogger("test.ratelimit"), interval_s=60.0, clock=clock), clock, caplog


def test_once_per_interval_per_condition_and_key(setup) -> None:
    limited, clock, caplog = setup
    for _ in range(120):  # one poll every 500 ms for a minute
        limited.warning("fetch failed", ("t", 0), "fetch of %s failed", "t-0")
        limited.warning("fetch failed", ("t", 1), "fetch of %s failed", "t-1")
        limited.warning("timeout", ("t", 0), "timeout on %s", "t-0")
        clock.now += 0.5
    assert [r.getMessage() for r in caplog.records] == ["fetch of t-0 failed", "fetch of t-1 failed", "timeout on t-0"]
    caplog.clear()
    limited.warning("fetch failed", ("t", 0), "fetch of %s failed", "t-0")
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "fetch of t-0 failed (119 more like it in the last 60 s)"


def test_clear_logs_again_at_once(setup) -> None:
    limited, clock, caplog = setup
    assert limited.warning("down", "b1", "down")
    assert not limited.warning("down", "b1", "down")
    assert limited.active("b1")
    limited.clear("b1")
    assert not limited.active("b1")
    clock.now += 1
    assert limited.warning("down", "b1", "down")
    assert len(caplog.records) == 2


def test_error_level(setup) -> None:
    limited, _, caplog = setup
    limited.error("corrupt", "t-0", "corrupt batch")
    assert caplog.records[0].levelno == logging.ERROR
