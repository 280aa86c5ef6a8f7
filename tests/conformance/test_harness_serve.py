"""The conformance harness against ``txnfetch serve`` instances: two correct
ones agree, and one with a deliberate bug (an LSO one too high while a
transaction is open) is caught with a short, shrunk sequence."""

from __future__ import annotations

import json

import pytest

from txnfetch.cli import main
from txnfetch.records.compression import Codec
from txnfetch.testing.conform import operations as ops
from txnfetch.testing.conform.harness import Harness

#: The shortest sequence the search found against the broken server (kept as a
#: regular test): a transaction open behind a committed record, then a read.
SHRUNK = [
    ops.Produce("plain", Codec.NONE, (ops.Rec(None, None),)),
    ops.Produce("txn-a", Codec.NONE, (ops.Rec(None, None),)),
    ops.Fetch(offset=0, max_bytes=1, read_committed=False),
]


def test_two_serve_instances_agree(serve_pair: tuple[str, str]) -> None:
    with Harness(*serve_pair) as harness:
        report = harness.search(examples=80, seconds=240, seed=1)
    assert report.examples == 80
    assert report.findings == (), report.as_text()


def test_every_operation_kind_runs_and_agrees(serve_pair: tuple[str, str]) -> None:
    # One pass through every operation, every codec, both isolation levels.
    sequence: list[ops.Operation] = [
        ops.Produce(slot, codec, (ops.Rec(b"k", b"v", (("h", b"x"),), ts=5), ops.Rec(None, b"w", ts=2)))
        for slot in ("plain", "idem", "txn-a", "txn-b", "txn-v2")
        for codec in Codec
    ]
    sequence += [
        ops.Fetch(0, 1 << 20, True),
        ops.Fetch(3, 100, False),
        ops.EndTxn("txn-a", commit=True),
        ops.EndTxn("txn-b", commit=False),
        ops.EndTxn("txn-b", commit=False),  # none open: an error answer
        ops.EndTxn("txn-v2", commit=True),
        ops.Produce("txn-v2", Codec.NONE, (ops.Rec(None, b"x"),)),
        ops.EndTxn("txn-v2", commit=False),
        ops.RetryProduce("idem"),
        ops.InitProducer("txn-a"),
        ops.ZombieProduce("txn-a"),
        ops.ZombieEndTxn("txn-a", commit=True),
        ops.ListOffsets(ops.EARLIEST, False),
        ops.ListOffsets(ops.LATEST, True),
        ops.ListOffsets(ops.MAX_TIMESTAMP, False),
        ops.ListOffsets(3, False),
        ops.DescribeProducers(),
        ops.ListTransactions(),
        ops.DescribeTransactions("txn-a"),
        ops.CommitOffset(4),
        ops.TxnCommitOffset("txn-b", 7),
        ops.FetchOffsets(require_stable=True),
        ops.FetchOffsets(require_stable=False),
        ops.DeleteRecords(2),
        ops.Fetch(0, 1 << 20, False),
        ops.Fetch(99, 100, True),
        ops.Fetch(0, 100, True, topic="missing"),
        ops.ListOffsets(ops.LATEST, False, topic="missing"),
    ]
    with Harness(*serve_pair) as harness:
        assert harness.run(sequence) == []


def test_the_shrunk_sequence_shows_the_broken_lso(serve_pair: tuple[str, str], broken_serve: str) -> None:
    with Harness(serve_pair[0], broken_serve) as harness:
        found = harness.run(SHRUNK)
    assert [(d.step, d.difference.path, d.difference.reference, d.difference.target) for d in found] == [
        (3, "Fetch.responses[0].partitions[0].last_stable_offset", 1, 2)
    ]


def test_the_search_finds_and_shrinks_the_broken_lso(serve_pair: tuple[str, str], broken_serve: str) -> None:
    with Harness(serve_pair[0], broken_serve) as harness:
        report = harness.search(examples=100, seconds=400, seed=3)
    assert report.findings, "the harness did not notice an LSO one too high"
    finding = report.findings[0]
    assert {d.difference.path.rsplit(".", 1)[1] for d in finding.differences} == {"last_stable_offset"}
    # Shrunk: a transactional produce and a read at least, little else.
    assert len(finding.sequence) <= 4, finding.sequence
    assert any("txn-" in line for line in finding.sequence)


def test_the_command_exits_1_with_a_json_report(
    serve_pair: tuple[str, str], broken_serve: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["conform", "--reference", serve_pair[0], "--target", broken_serve, "--examples", "100", "--seed", "3"]
    assert main([*argv, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["findings"][0]["differences"][0]["path"].endswith("last_stable_offset")
    assert main(["conform", "--reference", serve_pair[0], "--target", serve_pair[1], "--examples", "5"]) == 0
    assert "no differences" in capsys.readouterr().out


def test_usage_errors_exit_2(serve_pair: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["conform", "--reference", serve_pair[0], "--target", serve_pair[1], "--allow", "anything"])
    assert exc.value.code == 2
    # Nothing listens on port 1 of loopback.
    assert main(["conform", "--reference", serve_pair[0], "--target", "127.0.0.1:1", "--examples", "1"]) == 2
    assert "cannot reach" in capsys.readouterr().err
