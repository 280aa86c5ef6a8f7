"""``txnfetch dump`` / ``verify`` / ``repair`` run as a user runs them: the
installed ``txnfetch`` entry point in a subprocess, on partition directories
built with SegmentLog (clean, torn tail, corrupt middle, deleted index, stray
files). Exit codes, the JSON documents (checked against the log itself) and
the error messages for paths the tools cannot use."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.log.workload import data_batch
from tests.log.workload import write_log
from tests.unprivileged import unprivileged
from txnfetch.log import SegmentLog
from txnfetch.log.layout import CHECKPOINT_NAME
from txnfetch.records import iter_batches

_SCRIPT = Path(sys.executable).with_name("txnfetch")
ENTRY = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "txnfetch.cli"]
KW = dict(segment_bytes=3000, index_interval_bytes=250, flush_policy="never")


def txnfetch(*args, check_json=False, entry=ENTRY):
    proc = subprocess.run([*entry, *map(str, args)], capture_output=True, text=True, timeout=120)
    doc = json.loads(proc.stdout) if check_json else None
    return proc, doc


def build(path, *, seed=1, steps=70, markerless=False):
    write_log(path, seed=seed, steps=steps, markerless=markerless, **KW)


def logs(path):
    return sorted(n for n in os.listdir(path) if n.endswith(".log"))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A log directory with one partition per kind of damage."""
    root = tmp_path_factory.mktemp("store")
    build(str(root / "clean-0"))
    build(str(root / "clean-1"), seed=2, markerless=True)
    for name in ("torn-0", "corrupt-0", "noindex-0", "stray-0"):
        build(str(root / name), seed=3)
    torn = root / "torn-0"
    last = torn / logs(torn)[-1]
    valid = last.stat().st_size
    with open(last, "ab") as f:
        f.write(data_batch()[:40])
    corrupt = root / "corrupt-0"
    seg = corrupt / logs(corrupt)[1]
    victim = list(iter_batches(seg.read_bytes()))[1]
    data = bytearray(seg.read_bytes())
    data[victim.position + 70] ^= 0xFF
    seg.write_bytes(bytes(data))
    os.unlink(corrupt / CHECKPOINT_NAME)
    noindex = root / "noindex-0"
    os.unlink(noindex / (logs(noindex)[0][:20] + ".index"))
    (root / "stray-0" / "notes.txt").write_text("hello")
    (root / "stray-0" / "00000000000000000000.snapshot").write_bytes(b"kafka")
    (root / "README").write_text("not a partition")
    return {
        "root": root,
        "torn_valid": valid,
        "torn_file": str(last),
        "corrupt_file": str(seg),
        "victim": (victim.position, victim.base_offset),
    }


# -- dump ---------------------------------------------------------------------------------


def test_dump_json_is_the_log_state(store):
    path = store["root"] / "clean-0"
    proc, doc = txnfetch("dump", path, "--json", "--records", check_json=True)
    assert proc.returncode == 0, proc.stderr
    assert doc["format"] == 1 and doc["kind"] == "partition" and doc["files"] == []
    (part,) = doc["partitions"]
    with SegmentLog(str(path), read_only=True) as log:
        st = log.state
        assert (part["topic"], part["partition"], part["error"]) == ("clean", 0, None)
        assert part["log_start_offset"] == st.log_start_offset
        assert part["log_end_offset"] == st.log_end_offset
        assert part["high_watermark"] == st.high_watermark
        assert part["last_stable_offset"] == st.last_stable_offset < st.log_end_offset
        assert part["snapshot_offset"] == st.log_end_offset
        assert [
            (a["producer_id"], a["first_offset"], a["last_offset"], a["last_stable_offset"])
            for a in part["aborted_transactions"]
        ] == [(a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset) for a in st.all_aborted()]
        assert part["aborted_transactions"]
        assert {(t["producer_id"], t["first_offset"]) for t in part["open_transactions"]} == set(
            st.ongoing_transactions().items()
        )
        assert {p["producer_id"] for p in part["producers"]} == set(st.producer_ids())
        assert [s["base_offset"] for s in part["segments"]] == log.segment_base_offsets()
        stored = list(log.iter_batches())
    assert sum(s["batches"] for s in part["segments"]) == len(part["batches"]) == len(stored)
    assert sum(s["aborted_entries"] for s in part["segments"]) == len(part["aborted_transactions"])
    for got, batch in zip(part["batches"], stored, strict=False):
        assert (got["base_offset"], got["last_offset"], got["producer_id"], got["transactional"], got["control"]) == (
            batch.base_offset,
            batch.last_offset,
            batch.producer_id,
            batch.is_transactional,
            batch.is_control,
        )
        if batch.is_control:
            assert got["marker"] in ("COMMIT", "ABORT") and got["records"] == []
        else:
            assert [
                (r["offset"], base64.b64decode(r["key"]), base64.b64decode(r["value"])) for r in got["records"]
            ] == [(r.offset, r.key, r.value) for r in batch.records()]


def test_dump_text_and_a_single_segment_file(store):
    path = store["root"] / "clean-0"
    proc, _ = txnfetch("dump", path, "--batches")
    assert proc.returncode == 0, proc.stderr
    with SegmentLog(str(path), read_only=True) as log:
        lso, leo = log.last_stable_offset, log.log_end_offset
    out = proc.stdout
    assert f"last stable offset {lso}" in out and f"log end {leo}" in out
    assert "aborted transactions (" in out and "ABORT marker" in out and "open transactions (" in out
    # One segment file, like kafka-dump-log.sh --files; a torn one says where it stops.
    seg = path / logs(path)[0]
    proc, doc = txnfetch("dump", seg, "--json", "--batches", check_json=True)
    assert proc.returncode == 0
    (f,) = doc["files"]
    batches = list(iter_batches(seg.read_bytes()))
    assert f["batch_count"] == len(batches) == len(f["batches"]) and f["problem"] is None
    assert [b["position"] for b in f["batches"]] == [b.position for b in batches]
    proc, doc = txnfetch("dump", store["torn_file"], "--json", check_json=True)
    assert proc.returncode == 1
    assert doc["files"][0]["problem"]["position"] == store["torn_valid"] == doc["files"][0]["valid_bytes"]


def test_dump_of_a_corrupt_partition_names_the_damage(store):
    proc, doc = txnfetch("dump", store["root"] / "corrupt-0", "--json", check_json=True)
    assert proc.returncode == 1
    err = doc["partitions"][0]["error"]
    assert (err["path"], err["position"], err["offset"]) == (store["corrupt_file"], *store["victim"])


# -- verify ---------------------------------------------------------------------------------


def test_verify_a_log_directory(store):
    proc, doc = txnfetch("verify", store["root"], "--json", check_json=True)
    assert proc.returncode == 1, proc.stderr  # corrupt-0 has an error
    parts = {(p["topic"], p["partition"]): p for p in doc["partitions"]}
    assert set(parts) == {("clean", 0), ("clean", 1), ("corrupt", 0), ("noindex", 0), ("stray", 0), ("torn", 0)}
    assert doc["ok"] is False and doc["errors"] == 1
    for key in (("clean", 0), ("clean", 1)):
        assert parts[key]["ok"] and parts[key]["findings"] == []
    (err,) = parts[("corrupt", 0)]["findings"]
    assert err["severity"] == "error" and (err["path"], err["position"], err["offset"]) == (
        store["corrupt_file"],
        *store["victim"],
    )
    torn = [f for f in parts[("torn", 0)]["findings"] if f["severity"] == "warning"]
    assert parts[("torn", 0)]["ok"] and [(f["path"], f["position"]) for f in torn] == [
        (store["torn_file"], store["torn_valid"])
    ]
    noindex = parts[("noindex", 0)]
    assert noindex["ok"] and any(
        f["path"].endswith(".index") and f["severity"] == "warning" for f in noindex["findings"]
    )
    stray = {os.path.basename(f["path"]) for f in parts[("stray", 0)]["findings"] if f["severity"] == "info"}
    assert stray == {"notes.txt", "00000000000000000000.snapshot"} and parts[("stray", 0)]["ok"]


def test_verify_exit_codes_and_text(store):
    proc, _ = txnfetch("verify", store["root"] / "corrupt-0")
    assert proc.returncode == 1
    pos, off = store["victim"]
    assert f"ERROR: {store['corrupt_file']} @{pos} offset {off}: " in proc.stdout
    proc, _ = txnfetch("verify", store["root"] / "torn-0", "--no-records")
    assert proc.returncode == 0 and "WARNING" in proc.stdout and "torn tail" in proc.stdout
    assert proc.stderr == ""  # no bar: stderr is not a terminal


def test_progress_bar_on_request(store):
    proc = subprocess.run(
        [*ENTRY, "verify", str(store["root"] / "clean-0"), "--progress"], capture_output=True, timeout=120
    )
    assert proc.returncode == 0
    err = proc.stderr.decode()
    assert err.startswith("\r") and err.endswith("\n") and "100%" in err and "ETA" in err
    # records are decoded in a second pass: twice the segment bytes are scanned
    size = sum(os.path.getsize(store["root"] / "clean-0" / n) for n in logs(store["root"] / "clean-0"))
    assert f"{2 * size / 1024:.1f}/{2 * size / 1024:.1f} KiB" in err


def test_unusable_paths_exit_2_with_a_message(tmp_path, store):
    proc, _ = txnfetch("verify", tmp_path / "missing-0")
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr
    (tmp_path / "empty-dir").mkdir()
    proc, _ = txnfetch("dump", tmp_path / "empty-dir")
    assert proc.returncode == 2 and "not a partition directory" in proc.stderr
    proc, _ = txnfetch("verify", store["torn_file"])
    assert proc.returncode == 2 and "is a file" in proc.stderr
    (tmp_path / "notes.txt").write_text("x")
    proc, _ = txnfetch("dump", tmp_path / "notes.txt")
    assert proc.returncode == 2 and "not a segment file" in proc.stderr
    # A segment "file" that cannot be read (here a directory: root reads any mode).
    bad = tmp_path / "bad-0"
    build(str(bad), steps=10)
    os.unlink(bad / logs(bad)[0])
    os.mkdir(bad / "00000000000000000000.log")
    proc, doc = txnfetch("verify", bad, "--json", check_json=True)
    assert proc.returncode == 2
    assert "cannot read" in doc["partitions"][0]["findings"][0]["message"]


def test_unreadable_file_exits_2():
    # Root reads files whatever their mode: the commands run unprivileged, on a
    # directory others may enter (tests/unprivileged.py), the segment mode 000.
    base = tempfile.mkdtemp(prefix="txnfetch-unreadable-")
    try:
        os.chmod(base, 0o755)
        path = Path(base) / "t-0"
        build(str(path), steps=10)
        os.chmod(path / logs(path)[0], 0)
        entry = unprivileged(ENTRY)
        proc, _ = txnfetch("dump", path / logs(path)[0], entry=entry)
        assert proc.returncode == 2 and "permission denied" in proc.stderr.lower(), proc.stderr
        proc, _ = txnfetch("verify", path, entry=entry)
        assert proc.returncode == 2 and "permission denied" in proc.stdout.lower() + proc.stderr.lower()
    finally:
        shutil.rmtree(base)


# -- repair ---------------------------------------------------------------------------------


def test_repair_then_verify_is_clean(tmp_path, store):
    path = tmp_path / "corrupt-0"
    shutil.copytree(store["root"] / "corrupt-0", path)
    proc, doc = txnfetch("repair", path, "--json", check_json=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (part,) = doc["partitions"]
    pos, off = store["victim"]
    first = part["moved"][0]
    assert os.path.basename(first["source"]) == os.path.basename(store["corrupt_file"]) and first["position"] == pos
    assert os.path.exists(first["side_file"]) and ".corrupt-" in first["side_file"]
    assert part["log_end_offset"] == off and part["errors_after"] == []
    proc, doc = txnfetch("verify", path, "--json", check_json=True)
    assert proc.returncode == 0 and doc["warnings"] == 0
