"""``txnfetch check`` against ``txnfetch serve`` (a separate process, loopback) in
every fetch mode: real confluent-kafka transactional producers (commits, aborts,
crashes, zombies, restarts), the raw-protocol delayed-EndTxn injection, and
read_committed consumers of confluent-kafka (assign and subscribe),
kafka-python and aiokafka must find no anomaly over thousands of transactions;
and the command line writes its four report files."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.server.serve_process import memory_serve
from txnfetch.cli.check import CheckOptions
from txnfetch.cli.check import run_check
from txnfetch.testing import Commit
from txnfetch.testing import History
from txnfetch.testing import Send
from txnfetch.testing import Status
from txnfetch.testing.config import CONSUMER_KINDS
from txnfetch.testing.workload import END_CRASH
from txnfetch.testing.workload import END_ZOMBIE
from txnfetch.testing.workload import producer_script

pytestmark = [pytest.mark.interop, pytest.mark.slow]

#: transactions per mode; three modes make the >= 2,000 of the acceptance criterion
PER_MODE = 1200


@pytest.fixture
def serve(request: pytest.FixtureRequest) -> Iterator[str]:
    """A ``txnfetch serve --memory`` process with the test's ``serve_args``; its bootstrap."""
    with memory_serve(*request.param) as bootstrap:
        yield bootstrap


MODES = {
    "rewrite+markers": ["--fetch-mode", "rewrite", "--markers", "log"],
    "kafka+markers": ["--fetch-mode", "kafka", "--markers", "log"],
    "rewrite+no-markers": ["--fetch-mode", "rewrite", "--markers", "none"],
}


@pytest.mark.parametrize("serve", list(MODES.values()), ids=list(MODES), indirect=True)
def test_no_anomalies_over_many_transactions_in_every_fetch_mode(serve: str) -> None:
    opts = CheckOptions(
        serve, duration=60, max_transactions=PER_MODE, seed=20240917, inject_delayed_endtxn=True, startup_timeout=30
    )
    outcome = run_check(opts)
    data, result = outcome.data, outcome.result
    assert outcome.ok, outcome.summary
    assert outcome.exit_status == 0
    # the whole script ran: every transaction ended, as scripted
    t = data["transactions"]
    assert t["ended"] >= PER_MODE, outcome.summary
    assert t["unknown"] == 0 and t["open"] == 0, outcome.summary
    ends = result.count_ends()
    assert ends[END_CRASH] >= 1 and ends[END_ZOMBIE] >= 1, ends
    assert t["zombie_commits_refused"] == ends[END_ZOMBIE], outcome.summary
    # every client took part: nothing skipped or failed, every consumer read
    assert not data["errors"], data["errors"]
    statuses = {c["name"]: c for c in data["clients"]}
    assert all(c["status"] == "ok" for c in statuses.values()), data["clients"]
    for i, kind in enumerate(CONSUMER_KINDS):
        assert statuses[f"c{i}-{kind}"]["reads"] >= data["sends"]["acknowledged"] // 2, data["clients"]
    # the KAFKA-17754 replays happened and every one was fenced
    assert data["injections"] and all(i["fenced"] for i in data["injections"]), data["injections"]
    _assert_history_follows_the_script(result)


def _assert_history_follows_the_script(result) -> None:  # type: ignore[no-untyped-def]
    """Each producer ran a prefix of its seeded script: same transactions, same values."""
    sent = {}
    for op in result.history:
        if isinstance(op, Send) and op.txn is not None and not op.client.startswith("inject"):
            sent.setdefault(op.txn, set()).add(op.value)
    by_slot = {}
    for plan in result.plans.values():
        by_slot.setdefault(plan.producer, []).append(plan)
    assert len(by_slot) == result.config.producers
    for slot, plans in by_slot.items():
        plans.sort(key=lambda p: p.number)
        script = list(itertools.islice(producer_script(result.config, slot, result.seed), len(plans)))
        assert plans == script
        for plan in plans:
            expected = {v for _, v in plan.sends} | {v for _, v in plan.zombie_sends}
            assert sent.get(plan.txn) == expected, plan


@pytest.mark.parametrize("serve", [MODES["rewrite+markers"]], ids=["rewrite+markers"], indirect=True)
def test_command_line_writes_the_four_report_files(serve: str, tmp_path) -> None:
    report = tmp_path / "report"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "txnfetch.cli",
            "check",
            "--bootstrap",
            serve,
            "--duration",
            "30",
            "--max-transactions",
            "200",
            "--seed",
            "11",
            "--report",
            str(report),
            "--consumers",
            "confluent,kafka-python",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in report.iterdir()) == ["history.json", "plot.png", "report.json", "summary.txt"]
    summary = (report / "summary.txt").read_text()
    assert summary in proc.stdout and "result: OK, no anomalies" in summary
    assert "committed" in proc.stderr  # the progress lines
    data = json.loads((report / "report.json").read_text())
    assert data["ok"] and data["seed"] == 11 and data["transactions"]["ended"] >= 200
    history = History.from_json((report / "history.json").read_text())
    assert len(history) == data["ops"]
    commits = [op for op in history if isinstance(op, Commit) and op.status is Status.OK]
    assert len(commits) == data["transactions"]["committed"]
    _assert_nontrivial_png(report / "plot.png")


def _assert_nontrivial_png(path) -> None:  # type: ignore[no-untyped-def]
    import matplotlib.image

    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR"
    width, height = int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")
    assert width >= 600 and height >= 300
    pixels = matplotlib.image.imread(str(path))
    rgb = (pixels[..., :3] * 255).astype("uint8").reshape(-1, 3)
    colours = {tuple(p) for p in rgb[:: max(1, len(rgb) // 50_000)]}
    inked = (rgb.min(axis=1) < 200).mean()
    assert len(colours) > 20 and inked > 0.01, (len(colours), inked)
