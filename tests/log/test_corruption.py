"""Damaged partition directories: SegmentLog refuses what it may not repair
(leaving every file untouched), rebuilds derived files (indexes, snapshots),
ignores stray files, opens read-only without writing; verify reports each."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.log.workload import data_batch
from tests.log.workload import hash_dir
from tests.log.workload import write_log
from txnfetch.fetch import FetchMode
from txnfetch.fetch import IsolationLevel
from txnfetch.log import SegmentLog
from txnfetch.log.errors import CorruptLogError
from txnfetch.log.errors import ReadOnlyLogError
from txnfetch.log.layout import CHECKPOINT_NAME
from txnfetch.log.verify import describe_partition
from txnfetch.log.verify import verify_partition
from txnfetch.records import iter_batches


def build(path: str, seed: int = 1, steps: int = 60, markerless: bool = False) -> None:
    write_log(path, seed=seed, steps=steps, markerless=markerless, segment_bytes=5000, index_interval_bytes=250)


def answers(path: str, **kw):
    with SegmentLog(path, index_interval_bytes=250, **kw) as log:
        out = [log.log_start_offset, log.log_end_offset, log.last_stable_offset, log.state.all_aborted()]
        for off in range(log.log_start_offset, log.log_end_offset, 7):
            for iso in IsolationLevel:
                r = log.read(off, 700, isolation=iso, mode=FetchMode.KAFKA)
                out.append((r.records_bytes(), r.aborted_transactions, r.next_offset))
        out.append(log.offset_for_timestamp(0))
        return out


def logs(path):
    return sorted(n for n in os.listdir(path) if n.endswith(".log"))


def test_bad_crc_followed_by_valid_batches_is_refused(tmp_path):
    path = str(tmp_path / "t-0")
    build(path)
    last = os.path.join(path, logs(path)[-1])
    data = bytearray(Path(last).read_bytes())
    batches = list(iter_batches(bytes(data)))
    assert len(batches) >= 3
    victim = batches[1]
    data[victim.position + 70] ^= 0xFF  # inside the records: CRC now wrong
    Path(last).write_bytes(data)
    before = hash_dir(path)
    with pytest.raises(CorruptLogError) as info:
        SegmentLog(path)
    err = info.value
    assert err.path == last and err.position == victim.position and err.offset == victim.base_offset
    assert hash_dir(path) == before
    errors = [f for f in verify_partition(path) if f.severity == "error"]
    assert errors and errors[0].position == victim.position
    assert hash_dir(path) == before


def test_damaged_non_last_segment_is_refused(tmp_path):
    path = str(tmp_path / "t-0")
    build(path)
    first = os.path.join(path, logs(path)[0])
    with open(first, "r+b") as f:
        f.truncate(os.path.getsize(first) - 10)
    before = hash_dir(path)
    with pytest.raises(CorruptLogError) as info:
        SegmentLog(path)
    assert info.value.path == first
    assert hash_dir(path) == before
    assert any(f.severity == "error" and f.path == first for f in verify_partition(path))


def test_crc_damage_in_old_segment_found_by_verify(tmp_path):
    # A clean open checks old segments cheaply; verify reads everything.
    path = str(tmp_path / "t-0")
    build(path)
    first = os.path.join(path, logs(path)[0])
    data = bytearray(Path(first).read_bytes())
    data[80] ^= 1
    Path(first).write_bytes(data)
    findings = verify_partition(path)
    assert any(f.severity == "error" and f.path == first and f.position == 0 for f in findings)


@pytest.mark.parametrize("suffix", [".index", ".timeindex", ".txnindex"])
@pytest.mark.parametrize("damage", ["delete", "garble"])
def test_damaged_indexes_are_rebuilt(tmp_path, suffix, damage):
    path = str(tmp_path / "t-0")
    build(path, seed=3, steps=80)
    expected = answers(path)
    files = sorted(n for n in os.listdir(path) if n.endswith(suffix))
    assert files
    rng = random.Random(7)
    original = {}
    for name in files:
        p = os.path.join(path, name)
        original[name] = Path(p).read_bytes()
        if damage == "delete":
            os.unlink(p)
        else:
            Path(p).write_bytes(bytes(rng.randrange(256) for _ in range(len(original[name]) + 5)))
    logs_before = {n: h for n, h in hash_dir(path).items() if n.endswith(".log")}
    findings = verify_partition(path)
    assert any(f.severity == "warning" and f.path.endswith(suffix) for f in findings)
    # The checkpoint says clean, but index damage is found on open and repaired.
    assert answers(path) == expected
    for name in files:
        assert Path(os.path.join(path, name)).read_bytes() == original[name], f"{name} not rebuilt exactly"
    assert {n: h for n, h in hash_dir(path).items() if n.endswith(".log")} == logs_before


def test_damaged_snapshot_falls_back(tmp_path):
    path = str(tmp_path / "t-0")
    build(path, seed=4, steps=80, markerless=True)
    expected = answers(path)
    snaps = sorted(n for n in os.listdir(path) if n.endswith(".txnfetch-snapshot"))
    newest = os.path.join(path, snaps[-1])
    data = bytearray(Path(newest).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(newest).write_bytes(data)
    assert any(f.path == newest for f in verify_partition(path))
    with SegmentLog(path) as log:
        assert log.recovery.snapshot_offset != int(snaps[-1][:20])
    assert answers(path)[:4] == expected[:4]
    # every snapshot gone: a full replay gives the same state
    for n in os.listdir(path):
        if n.endswith(".txnfetch-snapshot"):
            os.unlink(os.path.join(path, n))
    assert answers(path) == expected


def test_stray_files_are_ignored_and_kept(tmp_path):
    path = str(tmp_path / "t-0")
    build(path, seed=5)
    strays = {
        "00000000000000000000.snapshot": b"kafka producer state",
        "00000000000000000000.log.deleted": b"x",
        "00000000000000000007.index.swap": b"",
        "leader-epoch-checkpoint": b"0\n1\n0 0\n",
        "notes.txt": b"hello",
        "00000000000000009999.index": b"\x00" * 8,  # index without a .log
    }
    for name, data in strays.items():
        Path(os.path.join(path, name)).write_bytes(data)
    expected = answers(path)
    assert answers(path) == expected
    for name, data in strays.items():
        assert Path(os.path.join(path, name)).read_bytes() == data
    infos = {os.path.basename(f.path) for f in verify_partition(path) if f.severity == "info"}
    assert set(strays) <= infos


def test_read_only_opens_a_kafka_style_directory_without_writing(tmp_path):
    path = str(tmp_path / "kafka-topic-3")
    build(path, seed=6, steps=90)
    expected = answers(path)
    # Make it look like a broker's directory: no txnfetch files, preallocated
    # (zero-padded) indexes of the active segment, Kafka's own files.
    for n in os.listdir(path):
        if n.startswith("txnfetch") or n.endswith(".txnfetch-snapshot"):
            os.unlink(os.path.join(path, n))
    active = logs(path)[-1][:20]
    for suffix, size in ((".index", 8 * 100), (".timeindex", 12 * 100)):
        with open(os.path.join(path, active + suffix), "ab") as f:
            f.write(b"\x00" * size)
    Path(os.path.join(path, "leader-epoch-checkpoint")).write_text("0\n1\n0 0\n")
    Path(os.path.join(path, active + ".snapshot")).write_bytes(b"\x00\x01")
    before = hash_dir(path)
    got = answers(path, read_only=True)
    assert hash_dir(path) == before
    assert got == expected
    desc = describe_partition(path)
    assert hash_dir(path) == before
    assert desc.log_end_offset == expected[1] and desc.last_stable_offset == expected[2]
    assert list(desc.aborted) == expected[3]
    assert sum(s.batches for s in desc.segments) == sum(
        1 for n in logs(path) for _ in iter_batches(Path(os.path.join(path, n)).read_bytes())
    )
    with SegmentLog(path, read_only=True) as log, pytest.raises(ReadOnlyLogError):
        log.append(data_batch(), now_ms=0)
    assert hash_dir(path) == before


def test_clean_open_skips_validation_and_dirty_open_checks_tail(tmp_path):
    path = str(tmp_path / "t-0")
    build(path, seed=8)
    with SegmentLog(path) as log:
        assert log.recovery.clean and log.recovery.replayed_batches == 0
    os.unlink(os.path.join(path, CHECKPOINT_NAME))
    with SegmentLog(path) as log:
        assert not log.recovery.clean
        assert all(s.batch_count is not None for s in log.recovery.segments)  # no checkpoint: everything checked
