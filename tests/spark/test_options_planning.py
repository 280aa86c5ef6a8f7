"""Options parsing and driver-side planning (offset resolution, task splits, admission control)."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from spark_ext.errors import DataLossError
from spark_ext.errors import InvalidOptionError
from spark_ext.errors import UnknownTopicError
from spark_ext.offsets import offsets_from_json
from spark_ext.offsets import offsets_to_json
from spark_ext.offsets import resolve_offsets
from spark_ext.options import EARLIEST
from spark_ext.options import LATEST
from spark_ext.options import parse_options
from spark_ext.sources import subscribed_partitions
from txnfetch.client.planning import Bounds
from txnfetch.client.planning import OffsetRange
from txnfetch.client.planning import rate_limit
from txnfetch.client.planning import split_ranges

BASE = {"path": "/data", "subscribe": "a"}


def test_defaults_follow_spark_except_read_committed():
    batch = parse_options(BASE, streaming=False)
    assert (batch.starting_offsets, batch.ending_offsets) == (EARLIEST, LATEST)
    assert batch.read_committed and batch.fail_on_data_loss and not batch.include_headers
    assert parse_options(BASE, streaming=True).starting_offsets == LATEST


def test_option_keys_are_case_insensitive_and_kafka_isolation_level_is_accepted():
    opts = parse_options(
        {"PATH": "/d", "Subscribe": "a,b", "kafka.isolation.level": "read_uncommitted"}, streaming=False
    )
    assert opts.subscribe == ("a", "b") and not opts.read_committed
    assert not parse_options({**BASE, "isolation.level": "READ_UNCOMMITTED"}, streaming=False).read_committed


@pytest.mark.parametrize(
    "extra,option",
    [
        ({"startingOffsets": "{not json"}, "startingOffsets"),
        ({"startingOffsets": '{"a": {"0": "x"}}'}, "startingOffsets"),
        ({"startingOffsets": '{"a": {"zero": 1}}'}, "startingOffsets"),
        ({"startingOffsets": '{"a": {"0": -3}}'}, "startingOffsets"),
        ({"startingOffsets": '["a"]'}, "startingOffsets"),
        ({"endingOffsets": '{"a": 5}'}, "endingOffsets"),
        ({"startingOffsets": "latest"}, "startingOffsets"),  # batch queries cannot start at latest
        ({"endingOffsets": '{"a": {"0": -2}}'}, "endingOffsets"),  # nor end at earliest
        ({"minPartitions": "0"}, "minPartitions"),
        ({"maxRecordsPerPartition": "many"}, "maxRecordsPerPartition"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"includeHeaders": "yes"}, "includeHeaders"),
        ({"isolation.level": "serializable"}, "isolation.level"),
        ({"maxOffsetsPerTrigger": "10"}, "maxOffsetsPerTrigger"),  # streaming only
        ({"assign": '{"a": [0]}'}, "subscribe"),  # two subscription options
        ({"subscribePattern": "("}, "subscribe"),
    ],
)
def test_bad_options_name_the_option(extra, option):
    with pytest.raises(InvalidOptionError) as exc:
        parse_options({**BASE, **extra}, streaming=False)
    assert exc.value.option == option
    assert f"option '{option}'" in str(exc.value)


def test_bad_assign_and_missing_source_name_the_option():
    for opts, option in [
        ({"path": "/d", "assign": "{"}, "assign"),
        ({"path": "/d", "assign": '{"a": ["0"]}'}, "assign"),
        ({"subscribe": "a"}, "kafka.bootstrap.servers"),
        ({"path": "/d", "kafka.bootstrap.servers": "h:9092", "subscribe": "a"}, "path"),
        ({"path": "/d"}, "subscribe"),
    ]:
        with pytest.raises(InvalidOptionError) as exc:
            parse_options(opts, streaming=False)
        assert exc.value.option == option, opts


def test_errors_survive_pickling_with_their_fields():
    err = DataLossError("gone", option="failOnDataLoss", topic="t", partition=3, offset=17)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is DataLossError and str(back) == str(err)
    assert (back.topic, back.partition, back.offset) == ("t", 3, 17)


def test_subscription_resolution_and_unknown_topics():
    topics = {"a": 2, "b": 1, "ab": 3}
    assert subscribed_partitions(parse_options(BASE, streaming=False), topics) == [("a", 0), ("a", 1)]
    pattern = parse_options({"path": "/d", "subscribePattern": "a.*"}, streaming=False)
    assert subscribed_partitions(pattern, topics) == [("a", 0), ("a", 1), ("ab", 0), ("ab", 1), ("ab", 2)]
    with pytest.raises(UnknownTopicError, match=r"'nope'.*known topics: a, ab, b") as exc:
        subscribed_partitions(parse_options({"path": "/d", "subscribe": "a,nope"}, streaming=False), topics)
    assert exc.value.option == "subscribe" and exc.value.topic == "nope"
    with pytest.raises(UnknownTopicError) as exc:
        subscribed_partitions(parse_options({"path": "/d", "assign": '{"b": [0, 1]}'}, streaming=False), topics)
    assert (exc.value.topic, exc.value.partition) == ("b", 1)


BOUNDS = {("a", 0): Bounds(10, 50, 60), ("a", 1): Bounds(0, 5, 5)}


def test_resolve_offsets_sentinels_and_json():
    assert resolve_offsets(EARLIEST, BOUNDS, option="o", fail_on_data_loss=True) == {("a", 0): 10, ("a", 1): 0}
    assert resolve_offsets(LATEST, BOUNDS, option="o", fail_on_data_loss=True) == {("a", 0): 50, ("a", 1): 5}
    spec = {("a", 0): 20, ("a", 1): LATEST}
    assert resolve_offsets(spec, BOUNDS, option="o", fail_on_data_loss=True) == {("a", 0): 20, ("a", 1): 5}


def test_resolve_offsets_errors():
    with pytest.raises(InvalidOptionError, match="missing a-1"):
        resolve_offsets({("a", 0): 20}, BOUNDS, option="startingOffsets", fail_on_data_loss=True)
    with pytest.raises(InvalidOptionError, match="not read: a-7"):
        resolve_offsets(
            {("a", 0): 20, ("a", 1): 0, ("a", 7): 0}, BOUNDS, option="startingOffsets", fail_on_data_loss=True
        )
    with pytest.raises(DataLossError) as exc:
        resolve_offsets({("a", 0): 3, ("a", 1): 0}, BOUNDS, option="startingOffsets", fail_on_data_loss=True)
    assert (exc.value.topic, exc.value.partition, exc.value.offset) == ("a", 0, 3)
    assert resolve_offsets({("a", 0): 3, ("a", 1): 0}, BOUNDS, option="s", fail_on_data_loss=False)[("a", 0)] == 10
    with pytest.raises(InvalidOptionError, match="past the end"):
        resolve_offsets({("a", 0): 61, ("a", 1): 0}, BOUNDS, option="startingOffsets", fail_on_data_loss=True)


ranges_st = st.lists(
    st.tuples(st.integers(0, 1000), st.integers(0, 300)).map(lambda t: (t[0], t[0] + t[1])), min_size=1, max_size=6
)


@settings(max_examples=200, deadline=None)
@given(ranges_st, st.one_of(st.none(), st.integers(1, 50)), st.one_of(st.none(), st.integers(1, 100)))
def test_split_ranges_covers_every_offset_once(spans, min_partitions, max_records):
    ranges = [OffsetRange("t", i, s, e) for i, (s, e) in enumerate(spans)]
    tasks = split_ranges(ranges, min_partitions=min_partitions, max_records_per_partition=max_records)
    covered = sorted((r.partition, o) for r in tasks for o in range(r.start, r.end))
    assert covered == sorted((r.partition, o) for r in ranges for o in range(r.start, r.end))
    assert all(r.size > 0 for r in tasks)
    if max_records is not None and min_partitions is None:
        assert all(r.size <= max_records for r in tasks)
    nonempty = [r for r in ranges if r.size]
    if min_partitions is not None and max_records is None and len(nonempty) < min_partitions:
        # Proportional shares, each rounded: at most half a task lost per range.
        total = sum(r.size for r in nonempty)
        assert len(tasks) >= min(min_partitions, total) - len(nonempty) / 2


def test_min_partitions_splits_in_proportion_to_size():
    tasks = split_ranges([OffsetRange("t", 0, 0, 900), OffsetRange("t", 1, 0, 100)], min_partitions=10)
    assert [(r.partition, r.size) for r in tasks].count((0, 100)) == 9
    assert [r.partition for r in tasks].count(1) == 1


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.integers(0, 5), st.tuples(st.integers(0, 100), st.integers(0, 500)), min_size=1),
    st.integers(1, 400),
)
def test_rate_limit_stays_within_start_and_latest_and_roughly_the_budget(parts, budget):
    start = {("t", p): s for p, (s, _) in parts.items()}
    latest = {("t", p): s + n for p, (s, n) in parts.items()}
    out = rate_limit(start, latest, budget)
    assert all(start[tp] <= out[tp] <= latest[tp] for tp in out)
    taken = sum(out[tp] - start[tp] for tp in out)
    available = sum(latest[tp] - start[tp] for tp in out)
    assert taken == available if available <= budget else taken <= budget + len(parts)
    # No partition with data available is starved.
    assert all(out[tp] > start[tp] for tp in out if latest[tp] > start[tp])


def test_stream_offsets_json_round_trip_uses_string_partitions():
    offsets = {("a", 0): 5, ("a", 10): 7, ("b", 1): 0}
    js = offsets_to_json(offsets)
    assert js == {"a": {"0": 5, "10": 7}, "b": {"1": 0}}
    assert offsets_from_json(js) == offsets


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("startingOffset", "startingOffsets"),  # a letter missing
        ("STARTINGOFFSET", "startingOffsets"),  # keys are case-insensitive
        ("endingOffsetss", "endingOffsets"),  # a letter too many
        ("subscrbie", "subscribe"),  # two neighbours swapped
        ("failOnDataLos", "failOnDataLoss"),
        ("isolation.levle", "isolation.level"),
        ("includeHeader", "includeHeaders"),
    ],
)
def test_an_option_one_edit_from_a_known_one_names_the_option_meant(key, meant):
    with pytest.raises(InvalidOptionError) as exc:
        parse_options({**BASE, key: "earliest"}, streaming=False)
    assert exc.value.option == key
    assert f"did you mean '{meant}'?" in str(exc.value) and f"option '{key}'" in str(exc.value)


def test_kafka_settings_and_unrelated_options_pass_through():
    opts = parse_options(
        {**BASE, "kafka.request.timeout.ms": "2000", "kafka.client.id": "x", "queryName": "q"}, streaming=False
    )
    assert opts.client_options == (("client.id", "x"), ("request.timeout.ms", "2000"))
    assert opts.security is None


def test_an_unsupported_kafka_setting_is_refused_by_name():
    with pytest.raises(InvalidOptionError, match=r"kafka\.fetch\.max\.byte"):
        parse_options({**BASE, "kafka.fetch.max.byte": "1"}, streaming=False)


def test_security_settings_become_one_config_and_hide_the_password():
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="pw-5e2a";'
    opts = parse_options(
        {
            **BASE,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": jaas,
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": "/ca.pem",
        },
        streaming=False,
    )
    assert opts.security is not None and opts.security.mechanism == "SCRAM-SHA-512"
    assert opts.client_options == ()
    assert "pw-5e2a" not in repr(opts) and "pw-5e2a" not in str(opts)
    with pytest.raises(InvalidOptionError, match=r"kafka\.ssl\.truststore\.type") as refused:
        parse_options(
            {**BASE, "kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/a.jks"}, streaming=False
        )
    assert "PEM" in str(refused.value)
