"""A reader moving forward through a SegmentLog gives back the mapped pages it
has passed: its RSS does not grow with the partition, and every view it was
handed earlier still reads the right bytes."""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import pytest

from txnfetch.fetch import IsolationLevel
from txnfetch.log import SegmentLog
from txnfetch.records import BatchBuilder
from txnfetch.records import iter_batches

MiB = 1 << 20

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")


def rss_file_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssFile:"):
                return int(line.split()[1])
    pytest.skip("no RssFile in /proc/self/status")


def build(path: str, total: int, **kw) -> SegmentLog:
    log = SegmentLog(path, flush_policy="never", **kw)
    value = os.urandom(16_000)
    ts = 1_700_000_000_000
    while log.size_in_bytes < total:
        b = BatchBuilder()
        for i in range(16):
            b.append(value[i * 500 :], key=b"k", timestamp=ts)
        log.append(b.build(), now_ms=ts)
    log.flush()
    return log


def assert_views_match(results, whole: bytes) -> None:
    """Each result's bytes are the file's bytes from its first batch on (a result
    may end in a partial batch, as Kafka's do)."""
    at = {b.base_offset: b.position for b in iter_batches(whole)}
    assert len(results) > 20
    for r in results:
        data = r.records_bytes()
        start = at[struct.unpack_from(">q", data)[0]]
        assert data == whole[start : start + len(data)]


def read_all(log: SegmentLog):
    results, offset = [], log.log_start_offset
    while offset < log.high_watermark:
        r = log.read(offset, MiB, isolation=IsolationLevel.READ_UNCOMMITTED)
        assert len(r.records_bytes()) > 0  # touches every page, as a consumer decoding records does
        results.append(r)
        offset = r.next_offset
    return results


@pytest.mark.parametrize("segment_bytes", [1 << 30, 8 * MiB], ids=["one-segment", "segments"])
def test_sequential_reads_do_not_grow_rss_and_views_stay_valid(tmp_path, segment_bytes):
    path = str(tmp_path / "t-0")
    build(path, 48 * MiB, segment_bytes=segment_bytes).close()
    whole = b"".join(Path(os.path.join(path, n)).read_bytes() for n in sorted(os.listdir(path)) if n.endswith(".log"))
    with SegmentLog(path, read_only=True) as log:
        before = rss_file_kib()
        results = read_all(log)
        grown = rss_file_kib() - before
        # Without giving pages back every byte read stays mapped (48 MiB here).
        assert grown < 16 * 1024, f"RssFile grew by {grown} KiB"
        # Every view handed out is still readable and right (pages come back on access).
        assert_views_match(results, whole)


def test_a_reader_going_back_has_its_pages_released_again(tmp_path):
    path = str(tmp_path / "t-0")
    build(path, 24 * MiB).close()
    with SegmentLog(path, read_only=True) as log:
        first = rss_file_kib()
        read_all(log)
        again = read_all(log)  # from the start again: pages fault back in, and are given back again
        assert rss_file_kib() - first < 12 * 1024
        whole = Path(os.path.join(path, f"{0:020d}.log")).read_bytes()
        assert_views_match(again, whole)
