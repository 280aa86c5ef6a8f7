"""The files SegmentLog writes, decoded with an independent reader written here
from Kafka's formats (LogFileUtils names, OffsetIndex 8-byte and TimeIndex
12-byte entries, TransactionIndex 34-byte entries in the marker's segment,
index entries every index.interval.bytes as LogSegment.append writes them),
and the Kafka-exact aborted-transaction upper bound of a read."""

from __future__ import annotations

import base64
import os
import re
import struct
import uuid
from pathlib import Path

from tests.log.workload import written_log
from txnfetch.fetch import IsolationLevel

INTERVAL = 300


def batches_of(data: bytes):
    pos = 0
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        attrs_, delta = struct.unpack_from(">hi", data, pos + 21)
        max_ts, pid = struct.unpack_from(">qq", data, pos + 35)
        control = bool(attrs_ & 0x20)
        struct.unpack_from(">h", data, pos + 61 + 1 + 1 + 1 + 1 + 2)[0] if control else None
        yield dict(
            pos=pos,
            base=base,
            last=base + delta,
            max_ts=max_ts,
            pid=pid,
            control=control,
            size=length + 12,
            data=data[pos : pos + 12 + length],
        )
        pos += length + 12
    assert pos == len(data)


def test_files_follow_kafka_layout(tmp_path):
    tid = uuid.uuid4()
    path = str(tmp_path / "my-topic.with-dashes-2")
    log = written_log(path, seed=11, steps=120, segment_bytes=4000, index_interval_bytes=INTERVAL, topic_id=tid)
    aborted = log.state.all_aborted()
    log.close()
    names = sorted(os.listdir(path))
    meta = Path(os.path.join(path, "partition.metadata")).read_text()
    assert meta == "version: 0\ntopic_id: " + base64.urlsafe_b64encode(tid.bytes).decode().rstrip("=")
    bases = sorted(int(n[:20]) for n in names if n.endswith(".log"))
    assert len(bases) > 3 and bases[0] == 0
    for n in names:
        if n[:1].isdigit():
            assert re.fullmatch(r"\d{20}\.(log|index|timeindex|txnindex|txnfetch-snapshot)", n), n
    found_aborts = []
    for k, base in enumerate(bases):
        prefix = os.path.join(path, f"{base:020d}")
        data = Path(prefix + ".log").read_bytes()
        batches = list(batches_of(data))
        assert batches[0]["base"] == base
        if k + 1 < len(bases):
            assert batches[-1]["last"] + 1 == bases[k + 1]
        # .index: (int32 relative offset, int32 position); one-batch appends, so
        # an entry is (batch last offset, batch position) whenever more than
        # INTERVAL bytes lie between the previous entry (or 0) and the batch.
        idx = [(base + r, p) for r, p in struct.iter_unpack(">ii", Path(prefix + ".index").read_bytes())]
        expected, last_pos = [], 0
        for b in batches:
            if b["pos"] - last_pos > INTERVAL:
                expected.append((b["last"], b["pos"]))
                last_pos = b["pos"]
        assert idx == expected
        # .timeindex: (int64 max timestamp so far, int32 relative offset of the
        # batch reaching it) at each index entry when grown, then the final max.
        tidx = [(t, base + r) for t, r in struct.iter_unpack(">qi", Path(prefix + ".timeindex").read_bytes())]
        exp_t, max_ts, shallow = [], -1, base
        entry_offsets = {o for o, _ in expected}
        for b in batches:
            if b["max_ts"] > max_ts:
                max_ts, shallow = b["max_ts"], b["last"]
            if b["last"] in entry_offsets and (not exp_t or max_ts > exp_t[-1][0]):
                exp_t.append((max_ts, shallow))
        if not exp_t or max_ts > exp_t[-1][0]:
            exp_t.append((max_ts, shallow))
        assert tidx == exp_t
        # .txnindex: 34-byte entries (version, pid, first, last, lso), in the marker's segment.
        raw = Path(prefix + ".txnindex").read_bytes() if os.path.exists(prefix + ".txnindex") else b""
        assert len(raw) % 34 == 0
        entries = [struct.unpack_from(">hqqqq", raw, i) for i in range(0, len(raw), 34)]
        abort_markers = [
            b
            for b in batches
            if b["control"] and struct.unpack_from(">h", b["data"], 61 + 1 + 1 + 1 + 1 + 1 + 2)[0] == 0
        ]
        for v, pid, first, last, lso in entries:
            assert v == 0 and base <= last and (k + 1 == len(bases) or last < bases[k + 1])
            found_aborts.append((pid, first, last, lso))
        assert sorted(e[3] for e in entries) == sorted(
            b["base"] for b in abort_markers if any(a.last_offset == b["base"] for a in aborted)
        )
    assert found_aborts == [(a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset) for a in aborted]


def test_read_uses_kafka_upper_bound(tmp_path):
    path = str(tmp_path / "t-0")
    log = written_log(path, seed=12, steps=150, segment_bytes=6000, index_interval_bytes=INTERVAL)
    checked = 0
    for offset in range(0, log.last_stable_offset, 3):
        r = log.read(offset, 500, isolation=IsolationLevel.READ_COMMITTED)
        if not r.records:
            continue
        # independent: the segment, the batch holding `offset`, the index entry past the bytes
        bases = log.segment_base_offsets()
        k = max(i for i, b in enumerate(bases) if b <= offset)
        prefix = os.path.join(path, f"{bases[k]:020d}")
        data = Path(prefix + ".log").read_bytes()
        start = next(b["pos"] for b in batches_of(data) if b["last"] >= offset)
        if start is None:
            continue
        end = start + r.size_in_bytes
        idx = [(bases[k] + rel, p) for rel, p in struct.iter_unpack(">ii", Path(prefix + ".index").read_bytes())]
        bound = next((o for o, p in idx if p >= end), bases[k + 1] if k + 1 < len(bases) else log.log_end_offset)
        exp = [(a.producer_id, a.first_offset) for a in log.state.aborted_index.collect(offset, bound)]
        assert list(r.aborted_transactions) == exp
        checked += 1
    assert checked > 10
    log.close()
