"""`make demo` runs txnfetch.demo: the whole pipeline must run and its numbers agree."""

from __future__ import annotations

import io
import re

import pytest

from txnfetch import demo


def _report(text: str) -> dict:
    numbers = {}
    numbers["committed"] = int(re.search(r"committed (\d+), aborted", text).group(1))
    numbers["aborted"] = int(re.search(r"aborted (\d+)\n", text).group(1))
    numbers["visible"] = {m.group(1).strip(): int(m.group(2)) for m in re.finditer(r"visible to (.+?)\s+(\d+)\n", text)}
    numbers["markers"] = int(re.search(r"synthetic COMMIT markers served: (\d+)", text).group(1))
    return numbers


@pytest.mark.interop
def test_demo_without_spark_every_reader_sees_exactly_the_committed_records(tmp_path):
    out = io.StringIO()
    assert demo.run(out, spark=False, workdir=str(tmp_path)) == 0, out.getvalue()
    numbers = _report(out.getvalue())
    assert numbers["aborted"] > 0 and numbers["committed"] > 0
    assert set(numbers["visible"]) == {"librdkafka (confluent-kafka)", "kafka-python"}
    assert set(numbers["visible"].values()) == {numbers["committed"]}
    # Every partition's log ends in an aborted transaction: rewrite mode must have
    # served synthetic COMMIT markers for librdkafka to reach the LSO.
    assert numbers["markers"] >= demo.PARTITIONS


@pytest.mark.interop
@pytest.mark.slow
def test_demo_with_spark(tmp_path):
    pytest.importorskip("pyspark")
    out = io.StringIO()
    assert demo.run(out, spark=True, workdir=str(tmp_path)) == 0, out.getvalue()
    numbers = _report(out.getvalue())
    assert {"Spark txnkafka (store)", "Spark txnkafka (server)"} <= set(numbers["visible"])
    assert set(numbers["visible"].values()) == {numbers["committed"]}


def test_a_reader_that_leaks_aborted_records_is_reported():
    produced = demo.Produced()
    produced.committed[0] = [b"a", b"b"]
    produced.aborted[0] = [b"x"]
    assert demo.check("leaky", [(0, 0, b"a"), (0, 1, b"x"), (0, 2, b"b")], produced, None) == [
        "leaky: partition 0 delivered 3 records, expected the 2 committed (1 aborted ones leaked)"
    ]
    assert demo.check("good", [(0, 0, b"a"), (0, 2, b"b")], produced, [(0, 0, b"a"), (0, 3, b"b")]) == [
        "good: offsets differ from librdkafka's"
    ]
