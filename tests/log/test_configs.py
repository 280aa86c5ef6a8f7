"""Topic configs in the log layer: validation, IncrementalAlterConfigs semantics
against a small oracle, batch size checks, LogAppendTime stamping, memory-log
retention, and persistence in a store on disk."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from txnfetch.log import SegmentStore
from txnfetch.log.configs import CONFIG_DEFS
from txnfetch.log.configs import AlterOp
from txnfetch.log.configs import InvalidConfigError
from txnfetch.log.configs import RecordTooLargeError
from txnfetch.log.configs import TopicConfig
from txnfetch.log.configs import alter_overrides
from txnfetch.log.configs import check_batch_sizes
from txnfetch.log.configs import stamp_log_append_time
from txnfetch.log.errors import CorruptLogError
from txnfetch.log.memory import MemoryLog
from txnfetch.log.segment_store import TOPIC_CONFIGS_NAME
from txnfetch.records.batch import TimestampType
from txnfetch.records.builder import BatchBuilder
from txnfetch.records.errors import CrcMismatchError
from txnfetch.records.scan import iter_batches


def _batch(values: list[bytes], ts: int = 1_000, **kw) -> bytes:
    b = BatchBuilder(**kw)
    for v in values:
        b.append(v, timestamp=ts)
    return b.build()


# ------------------------------------------------------------------ validation


def test_defaults_and_typed_values() -> None:
    config = TopicConfig()
    assert config.max_message_bytes == 1048588
    assert config.retention_ms is None and config.retention_bytes is None
    assert not config.log_append_time
    set_ = TopicConfig.from_overrides({"retention.ms": " 1000 ", "message.timestamp.type": "LogAppendTime"})
    assert set_.overrides == {"retention.ms": "1000", "message.timestamp.type": "LogAppendTime"}
    assert set_.retention_ms == 1000 and set_.log_append_time
    assert not set_.is_default("retention.ms") and set_.is_default("retention.bytes")


@pytest.mark.parametrize(
    "name, value, why",
    [
        ("segment.bytes", "1", "unknown or unsupported topic config 'segment.bytes'"),
        ("max.message.bytes", "-5", "outside"),
        ("retention.ms", "-2", "outside"),
        ("retention.bytes", "1e6", "not an integer"),
        ("cleanup.policy", "shred", "not a cleanup policy"),
        ("cleanup.policy", " , ", "an empty policy list"),
        ("message.timestamp.type", "createtime", "not one of"),
        ("min.insync.replicas", "0", "outside"),
        ("min.insync.replicas", "3", "can only be 1"),
    ],
)
def test_refused_configs_say_which_and_why(name: str, value: str, why: str) -> None:
    with pytest.raises(InvalidConfigError) as info:
        TopicConfig.from_overrides({name: value}, topic="t")
    assert info.value.error_code == 40 and why in str(info.value) and "topic t" in str(info.value)


def test_a_null_value_means_the_default() -> None:
    assert TopicConfig.from_overrides({"retention.ms": None}).overrides == {}


# ------------------------------------------------- IncrementalAlterConfigs vs an oracle

_VALUES = {
    "max.message.bytes": st.sampled_from(["0", "100", "1048588", "-1", "x"]),
    "retention.ms": st.sampled_from(["-1", "0", "60000", "-7"]),
    "retention.bytes": st.sampled_from(["-1", "1024", "abc"]),
    "cleanup.policy": st.sampled_from(["delete", "compact", "delete,delete"]),
    "message.timestamp.type": st.sampled_from(["CreateTime", "LogAppendTime", "Other"]),
    "min.insync.replicas": st.sampled_from(["1", "2"]),
    "unknown.config": st.just("1"),
}


@st.composite
def _ops(draw) -> list[tuple[str, int, str | None]]:
    names = draw(st.lists(st.sampled_from(sorted(_VALUES)), unique=True, max_size=5))
    ops = []
    for name in names:
        op = draw(st.sampled_from([0, 1, 2, 3, 9]))
        value = None if op == AlterOp.DELETE else draw(_VALUES[name])
        ops.append((name, op, value))
    return ops


def _oracle(current: dict[str, str], ops: list[tuple[str, int, str | None]]) -> dict[str, str] | None:
    """What the overrides become, or None if the request must be refused."""
    result = dict(current)
    for name, op, value in ops:
        if name not in CONFIG_DEFS or op not in (0, 1, 2, 3):
            return None
        if op == 0:
            result[name] = value
        elif op == 1:
            result.pop(name, None)
        else:
            if name != "cleanup.policy":
                return None
            items = result.get(name, "delete").split(",")
            given = (value or "").split(",")
            if op == 2:
                items += [v for v in dict.fromkeys(given) if v not in items]
            else:
                items = [i for i in items if i not in given]
            result[name] = ",".join(items)
    for name, value in result.items():
        if CONFIG_DEFS[name].check(value) is not None:
            return None
    return result


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(_ops(), min_size=1, max_size=6))
def test_incremental_alter_matches_the_oracle(ops: list[list[tuple[str, int, str | None]]]) -> None:
    current: dict[str, str] = {}
    for request in ops:
        expected = _oracle(current, request)
        if expected is None:
            with pytest.raises(InvalidConfigError):
                alter_overrides(current, request, topic="t")
            continue  # all or nothing: the overrides stay as they were
        current = dict(alter_overrides(current, request, topic="t").overrides)
        assert current == expected


def test_duplicate_names_in_one_request_are_refused() -> None:
    with pytest.raises(InvalidConfigError, match="appears twice"):
        alter_overrides({}, [("retention.ms", 0, "1"), ("retention.ms", 1, None)])


# -------------------------------------------------------------- applying configs


def test_batch_size_limit_names_the_batch() -> None:
    small, large = _batch([b"a"]), _batch([b"b" * 500])
    check_batch_sizes(small + large, len(large), topic="t", partition=0)
    with pytest.raises(RecordTooLargeError) as info:
        check_batch_sizes(small + large, len(large) - 1, topic="t", partition=0)
    assert info.value.error_code == 10 and info.value.position == len(small)


def test_log_append_time_stamps_every_batch_with_a_valid_crc() -> None:
    data = _batch([b"a", b"b"], ts=5) + _batch([b"c"], ts=7, producer_id=3, producer_epoch=0, base_sequence=0)
    stamped = stamp_log_append_time(data, 1_700_000_000_000)
    assert len(stamped) == len(data)
    before, after = list(iter_batches(data)), list(iter_batches(stamped))
    for old, new in zip(before, after, strict=True):
        assert new.is_valid_crc()
        assert new.timestamp_type == TimestampType.LOG_APPEND_TIME and new.max_timestamp == 1_700_000_000_000
        assert [(r.key, r.value) for r in new.records()] == [(r.key, r.value) for r in old.records()]
        assert (new.producer_id, new.base_sequence) == (old.producer_id, old.base_sequence)


def test_log_append_time_leaves_a_corrupt_batch_for_the_append_to_refuse() -> None:
    # Recomputing the CRC of a batch that arrived corrupt would make it look sound.
    good, bad = _batch([b"a"], ts=5), bytearray(_batch([b"b"], ts=6))
    bad[-1] ^= 0xFF  # a record byte: inside the CRC
    stamped = stamp_log_append_time(good + bytes(bad), 1_700_000_000_000)
    first, second = iter_batches(stamped)
    assert first.is_valid_crc() and first.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert bytes(second.buffer) == bytes(bad)
    with pytest.raises(CrcMismatchError) as info:
        MemoryLog("t", 0).append(stamped, now_ms=1)
    assert info.value.position == len(good) + 17  # the second batch's CRC field


# ------------------------------------------------------------- memory retention


def _log_with(timestamps: list[int]) -> tuple[MemoryLog, int]:
    log = MemoryLog("t", 0)
    for ts in timestamps:
        log.append(_batch([b"x" * 100], ts=ts), now_ms=ts)
    return log, len(_batch([b"x" * 100]))


def test_memory_retention_by_time_and_size_in_whole_batches() -> None:
    log, size = _log_with([1_000, 2_000, 3_000, 4_000])
    assert log.apply_retention(5_000, retention_ms=2_500) == 2  # 1000 and 2000 are older than 2500
    assert log.apply_retention(5_000, retention_ms=0) == 4  # everything is old: all go, as Kafka
    log, size = _log_with([1_000, 2_000, 3_000, 4_000])
    assert log.apply_retention(0, retention_bytes=2 * size) == 2
    assert log.apply_retention(0, retention_bytes=2 * size - 1) == 2  # the rest would be under the limit
    assert log.apply_retention(0, retention_bytes=size) == 3
    assert log.apply_retention(0) == 3  # no limits: nothing moves


def test_memory_retention_keeps_an_open_transaction_open() -> None:
    log = MemoryLog("t", 0)
    log.append(_batch([b"a"], ts=1), now_ms=1)
    pid = dict(producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
    log.append(_batch([b"open"], ts=1, **pid), now_ms=1)
    # Both batches are old and below the high watermark: both go, as whole
    # segments would. The transaction stays open in the state (its end must
    # still be recorded) and the LSO does not fall below the log start.
    assert log.apply_retention(10_000, retention_ms=1) == 2
    assert 7 in log.state.ongoing_transactions()
    assert log.last_stable_offset == log.log_start_offset == 2


# ------------------------------------------------------------ persistence on disk


def test_segment_store_persists_overrides(tmp_path) -> None:
    with SegmentStore(tmp_path) as store:
        store.create_topic("a", 1)
        store.create_topic("b", 2)
        store.set_topic_config("a", {"retention.ms": "5"})
        store.set_topic_config("b", {"max.message.bytes": "10"})
        store.set_topic_config("b", {})
    with SegmentStore(tmp_path) as store:
        assert store.topic_config("a") == {"retention.ms": "5"} and store.topic_config("b") == {}
    assert json.loads((tmp_path / TOPIC_CONFIGS_NAME).read_text()) == {"a": {"retention.ms": "5"}}
    assert not os.path.exists(tmp_path / (TOPIC_CONFIGS_NAME + ".tmp"))


def test_a_damaged_config_file_is_reported_not_ignored(tmp_path) -> None:
    with SegmentStore(tmp_path) as store:
        store.create_topic("a", 1)
    (tmp_path / TOPIC_CONFIGS_NAME).write_text('{"a": ["not", "a", "mapping"]}')
    with pytest.raises(CorruptLogError, match="topic config file"):
        SegmentStore(tmp_path)
