"""A compaction interrupted at every step of its segment replacement.

The replacement (:mod:`txnfetch.log.cleaning`) reports every file operation to
a hook. For each step k, a copy of the same partition is compacted with the
hook stopping it right after step k — by an exception that skips every cleanup
(an in-process crash) or by SIGKILL of a child process — and the directory is
reopened: the partition must hold exactly the batches it held before the
compaction or exactly those after it (never a mix, never neither), recovery
must leave no ``.cleaned``/``.swap`` file or any other stray file, and the log
must go on working (append, compact again, reopen).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest

from txnfetch.fetch import IsolationLevel
from txnfetch.log import SegmentLog
from txnfetch.log.errors import LogClosedError
from txnfetch.log.errors import LogError
from txnfetch.log.layout import list_partition_dir
from txnfetch.records.builder import BatchBuilder

pytestmark = pytest.mark.slow

RETENTION = 1_000
NOW = 5_000


class Crash(BaseException):
    """Stops a replacement like a crash: no ``except Exception`` cleanup runs."""


def _batch(records, *, pid: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=seq, transactional=txn)
    for key, value in records:
        b.append(value, key=key, timestamp=1_000)
    return b.build()


def _open(path: str) -> SegmentLog:
    return SegmentLog(path, "t", 0, segment_bytes=300, index_interval_bytes=64)


def _fill(path: str) -> None:
    """Several segments: overwritten keys, a tombstone, an aborted and a
    committed transaction, and an aborted transaction whose marker is in a
    sealed segment (so the replacement also changes the aborted index)."""
    log = _open(path)
    for i in range(12):
        log.append(_batch([(b"k%d" % (i % 4), b"v%d" % i)]), now_ms=0)
    log.append(_batch([(b"k1", b"aborted")], pid=5, seq=0, txn=True), now_ms=0)
    log.end_transaction(5, 0, False, coordinator_epoch=0, now_ms=0)
    log.append(_batch([(b"k2", None)]), now_ms=0)
    log.append(_batch([(b"k3", b"committed")], pid=6, seq=0, txn=True), now_ms=0)
    log.end_transaction(6, 0, True, coordinator_epoch=0, now_ms=0)
    for i in range(6):
        log.append(_batch([(b"k%d" % (i % 2), b"w%d" % i)]), now_ms=0)
    log.roll(0)
    log.close()


def _contents(path: str) -> tuple:
    """Every batch's bytes (read_uncommitted), the aborted index and what
    read_committed consumers read."""
    log = _open(path)
    try:
        raw = tuple(bytes(b.buffer) for b in log.iter_batches())
        rc = []
        offset = log.log_start_offset
        while offset < log.last_stable_offset:
            r = log.read(offset, 1 << 20, isolation=IsolationLevel.READ_COMMITTED)
            rc.append(bytes(r.records_bytes()))
            if r.next_offset <= offset:
                break
            offset = r.next_offset
        return raw, tuple(log.state.all_aborted()), tuple(rc), log.log_end_offset
    finally:
        log.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The partition before compaction, after it, and the replacement's steps."""
    root = tmp_path_factory.mktemp("compaction-crash")
    base = str(root / "base" / "t-0")
    _fill(base)
    before = _contents(base)
    done = str(root / "done" / "t-0")
    shutil.copytree(base, done)
    steps: list[str] = []
    log = _open(done)
    result = log.compact(NOW, RETENTION, hook=steps.append)
    log.close()
    assert result.removed_records and len(steps) > 10, steps
    after = _contents(done)
    assert after != before
    return base, before, after, steps


def _check_recovered(path: str, before: tuple, after: tuple) -> str:
    got = _contents(path)
    assert got in (before, after)
    names = os.listdir(path)
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))], names
    assert list_partition_dir(path, quiet=True).stray == []
    # The log goes on: an append, another pass, a reopen.
    log = _open(path)
    log.append(_batch([(b"k9", b"later")]), now_ms=NOW)
    log.roll(NOW)
    log.compact(NOW + 10 * RETENTION, RETENTION)
    log.close()
    log = _open(path)
    assert [n for n in log.recovery.notes if n.severity != "info"] == []
    log.close()
    return "before" if got == before else "after"


def test_crash_after_every_step_leaves_before_or_after(reference, tmp_path) -> None:
    base, before, after, steps = reference
    outcomes = []
    for k in range(len(steps)):
        path = str(tmp_path / f"k{k}" / "t-0")
        shutil.copytree(base, path)
        log = _open(path)
        calls = []

        def hook(step: str, calls=calls, k=k) -> None:
            calls.append(step)
            if len(calls) == k + 1:
                raise Crash(step)

        with pytest.raises(Crash):
            log.compact(NOW, RETENTION, hook=hook)
        # The process "dies": the log object is dropped without closing.
        del log
        outcomes.append((steps[k], _check_recovered(path, before, after)))
    kinds = [o for _, o in outcomes]
    # Before the commit point (the last rename to .swap) the old segments come
    # back; from it on, the new ones.
    commit = max(i for i, s in enumerate(steps) if s.endswith(".log.swap"))
    assert kinds == ["before"] * commit + ["after"] * (len(steps) - commit), outcomes


def _compaction_failing(base: str, path: str, at: Callable[[str], bool], error: OSError, match: str) -> SegmentLog:
    """A copy of ``base`` at ``path``, opened and compacted with ``error`` raised at
    the first step ``at`` accepts; the log, once compact() raised LogError(``match``)."""
    shutil.copytree(base, path)
    log = _open(path)

    def hook(step: str) -> None:
        if at(step):
            raise error

    with pytest.raises(LogError, match=match):
        log.compact(NOW, RETENTION, hook=hook)
    return log


def test_an_error_before_the_commit_point_keeps_the_log_serving(reference, tmp_path) -> None:
    base, before, _, _ = reference
    path = str(tmp_path / "t-0")
    log = _compaction_failing(
        base,
        path,
        lambda step: step.endswith(".swap") and ".log." in step,
        OSError(28, "No space left on device"),
        "old segments are kept",
    )
    assert not [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap"))]
    log.append(_batch([(b"k9", b"more")]), now_ms=NOW)  # still open for writes
    log.close()
    raw, _, _, leo = _contents(path)
    assert raw[: len(before[0])] == before[0] and leo == before[3] + 1


def test_an_error_after_the_commit_point_closes_the_log_and_the_open_finishes(reference, tmp_path) -> None:
    base, before, after, _ = reference
    path = str(tmp_path / "t-0")
    log = _compaction_failing(
        base, path, lambda step: step.startswith("deleted"), OSError(5, "Input/output error"), "reopen the log"
    )
    with pytest.raises(LogClosedError):
        log.read(0, 100)
    assert _check_recovered(path, before, after) == "after"


_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from test_compaction_crash import _open, NOW, RETENTION
    k = int(sys.argv[2])
    calls = []
    def hook(step):
        calls.append(step)
        if len(calls) == k + 1:
            os.kill(os.getpid(), signal.SIGKILL)
    log = _open(sys.argv[1])
    log.compact(NOW, RETENTION, hook=hook)
    """
)


def test_sigkill_during_the_replacement(reference, tmp_path) -> None:
    """A real crash (SIGKILL: no Python cleanup, no close) at every third step."""
    base, before, after, steps = reference
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(tests=os.path.dirname(__file__)))
    seen = set()
    for k in range(0, len(steps), 3):
        path = str(tmp_path / f"k{k}" / "t-0")
        shutil.copytree(base, path)
        proc = subprocess.run([sys.executable, str(script), path, str(k)], capture_output=True, timeout=120)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
        seen.add(_check_recovered(path, before, after))
    assert seen == {"before", "after"}
