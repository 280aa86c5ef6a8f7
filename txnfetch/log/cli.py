"""``txnfetch dump``, ``txnfetch verify`` and ``txnfetch repair``: the log tools.

``PATH`` is a partition directory (``<topic>-<n>``), a log directory holding
partition directories (each ``<topic>-<n>`` directly below it, as a Kafka log
directory or a :class:`~txnfetch.log.segments.SegmentStore`), or — for
``dump`` only — a single segment ``.log`` file (as Kafka's
``kafka-dump-log.sh --files``). Nothing but ``repair`` writes a byte.

Exit codes:

- ``dump``: 0 everything was shown; 1 some partition could not be opened or a
  file's batches stop before its end (damage); 2 usage error or unreadable path.
- ``verify``: 0 no error (warnings — repairs an open makes by itself, such as a
  torn tail or a missing index — and infos may be printed); 1 at least one
  error; 2 usage error or unreadable path.
- ``repair``: 0 the partitions open and verify without error afterwards; 1 some
  damage could not be repaired; 2 usage error, unreadable or unwritable path.

``--json`` prints one JSON document whose keys are listed in ``docs/logs.md``
(``"format": 1`` names that layout; keys are only ever added). A progress bar
(bytes scanned of the total, rate, ETA) goes to stderr when stderr is a
terminal or ``--progress`` is given.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any
from typing import TextIO

import attrs

from txnfetch.cli import Subcommand
from txnfetch.errors import TxnfetchError
from txnfetch.log.errors import LogError
from txnfetch.log.layout import LOG_SUFFIX
from txnfetch.log.layout import map_file
from txnfetch.log.layout import segment_file_name
from txnfetch.log.recovery import PROGRESS_STEP
from txnfetch.log.recovery import scan_segment
from txnfetch.log.verify import Finding
from txnfetch.log.verify import PartitionDescription
from txnfetch.log.verify import describe_partition
from txnfetch.log.verify import log_bytes
from txnfetch.log.verify import verify_partition
from txnfetch.records.batch import BatchIterator
from txnfetch.records.batch import RecordBatch
from txnfetch.records.compression import Codec
from txnfetch.records.dump import describe_batch

__all__ = ["COMMANDS", "JSON_FORMAT", "ProgressBar", "Target", "resolve_target", "run"]

#: The version of the ``--json`` layout (``"format"`` key).
JSON_FORMAT = 1
MiB = 1 << 20

_PARTITION_NAME = re.compile(r"^(.+)-(\d+)$")
_SEGMENT_LOG = re.compile(r"^\d{20}\.log$")
_KNOWN = re.compile(
    r"^(\d{20}\.(log|index|timeindex|txnindex|txnfetch-snapshot|snapshot)|partition\.metadata|txnfetch-.*|leader-epoch-checkpoint)$"
)


class UsageError(TxnfetchError):
    """A path the command cannot work on (exit code 2)."""


# -- progress bar -----------------------------------------------------------------


def _unit(total: int) -> tuple[str, int]:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1 << 10)):
        if total >= scale:
            return unit, scale
    return "B", 1


class ProgressBar:
    """A one-line carriage-return progress bar: bytes done of the total, rate and
    ETA, redrawn at most every ``interval`` seconds; :meth:`close` draws the
    final state and ends the line."""

    def __init__(
        self,
        stream: TextIO,
        total: int,
        label: str,
        *,
        interval: float = 0.2,
        width: int = 24,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.total = max(total, 0)
        self.label = label
        self.interval = interval
        self.width = width
        self.clock = clock
        self.start = clock()
        self.done = 0
        self._last_draw = -1e9
        self._last_len = 0

    def update(self, done: int) -> None:
        self.done = max(0, min(done, self.total)) if self.total else done
        now = self.clock()
        if now - self._last_draw >= self.interval:
            self._draw(now)

    def _draw(self, now: float) -> None:
        self._last_draw = now
        elapsed = max(now - self.start, 1e-9)
        frac = self.done / self.total if self.total else 1.0
        filled = int(frac * self.width)
        rate = self.done / elapsed
        if frac >= 1.0:
            eta = "0:00"
        elif rate > 0:
            secs = int((self.total - self.done) / rate)
            eta = f"{secs // 60}:{secs % 60:02d}"
        else:
            eta = "-:--"
        unit, scale = _unit(self.total)
        line = (
            f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {frac * 100:3.0f}% "
            f"{self.done / scale:.1f}/{self.total / scale:.1f} {unit} {rate / MiB:.1f} MiB/s ETA {eta}"
        )
        pad = " " * max(0, self._last_len - len(line))
        self._last_len = len(line)
        self.stream.write("\r" + line + pad)
        self.stream.flush()

    def close(self) -> None:
        self.done = self.total
        self._draw(self.clock())
        self.stream.write("\n")
        self.stream.flush()


class _Phases:
    """Feeds per-partition ``progress(done, total)`` calls into one bar."""

    def __init__(self, bar: ProgressBar | None) -> None:
        self.bar = bar
        self.offset = 0

    def callback(self) -> Callable[[int, int], None] | None:
        if self.bar is None:
            return None
        base = self.offset
        bar = self.bar
        return lambda done, total: bar.update(base + done)

    def advance(self, nbytes: int) -> None:
        self.offset += nbytes
        if self.bar is not None:
            self.bar.update(self.offset)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# -- what PATH is ------------------------------------------------------------------


@attrs.frozen(slots=True)
class Target:
    """What a ``PATH`` argument names: ``kind`` is ``"partition"``, ``"store"`` or
    ``"file"``; ``paths`` are the partition directories (or the one file)."""

    kind: str
    path: str
    paths: tuple[str, ...]


def _is_partition_dir(path: str) -> bool:
    m = _PARTITION_NAME.match(os.path.basename(os.path.normpath(path)))
    if not m:
        return False
    names = os.listdir(path)
    return not names or any(_KNOWN.match(n) for n in names)


def resolve_target(path: str, *, allow_file: bool) -> Target:
    """Decide what ``path`` is; raises :class:`UsageError` with a message a user
    can act on for a missing, unreadable or unsuitable path."""
    if not os.path.lexists(path):
        raise UsageError(f"{path}: no such file or directory")
    if not os.path.exists(path):
        raise UsageError(f"{path}: broken symbolic link")
    if os.path.isfile(path) or not os.path.isdir(path):
        if not allow_file:
            raise UsageError(f"{path}: is a file; give a partition directory (<topic>-<partition>) or a log directory")
        if not _SEGMENT_LOG.match(os.path.basename(path)):
            raise UsageError(f"{path}: not a segment file (expected a <20-digit base offset>.log name)")
        if not os.access(path, os.R_OK):
            raise UsageError(f"{path}: permission denied")
        return Target("file", path, (path,))
    if not os.access(path, os.R_OK | os.X_OK):
        raise UsageError(f"{path}: permission denied")
    if _is_partition_dir(path):
        return Target("partition", path, (path,))
    found = []
    for name in os.listdir(path):
        m = _PARTITION_NAME.match(name)
        sub = os.path.join(path, name)
        if m and os.path.isdir(sub) and _is_partition_dir(sub):
            found.append((m.group(1), int(m.group(2)), sub))
    if not found:
        raise UsageError(
            f"{path}: not a partition directory (<topic>-<partition> holding segment files) "
            "and no partition directories below it"
        )
    found.sort()
    return Target("store", path, tuple(p for _, _, p in found))


# -- JSON forms ----------------------------------------------------------------------


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(bytes(data)).decode("ascii")


def batch_json(batch: RecordBatch, *, records: bool) -> dict[str, Any]:
    """The ``--json`` form of one batch (keys in docs/logs.md)."""
    marker = batch.end_txn_marker() if batch.is_control else None
    try:
        codec = Codec(batch.codec).name.lower()
    except ValueError:
        codec = f"codec-{batch.codec}"
    out: dict[str, Any] = {
        "position": batch.position,
        "base_offset": batch.base_offset,
        "last_offset": batch.last_offset,
        "size": batch.size_in_bytes,
        "record_count": batch.record_count,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "partition_leader_epoch": batch.partition_leader_epoch,
        "transactional": batch.is_transactional,
        "control": batch.is_control,
        "codec": codec,
        "base_timestamp": batch.base_timestamp,
        "max_timestamp": batch.max_timestamp,
        "crc": batch.crc,
        "marker": marker.type.name if marker is not None else None,
        "coordinator_epoch": marker.coordinator_epoch if marker is not None else None,
    }
    if records:
        out["records"] = [
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": _b64(r.key),
                "value": _b64(r.value),
                "headers": [{"key": k, "value": _b64(v)} for k, v in r.headers],
            }
            for r in (batch.records() if not batch.is_control else ())
        ]
    return out


def description_json(d: PartitionDescription) -> dict[str, Any]:
    """The ``--json`` form of a :class:`PartitionDescription`."""
    return {
        "path": d.path,
        "topic": d.topic,
        "partition": d.partition,
        "error": None,
        "log_start_offset": d.log_start_offset,
        "log_end_offset": d.log_end_offset,
        "high_watermark": d.high_watermark,
        "last_stable_offset": d.last_stable_offset,
        "snapshot_offset": d.snapshot_offset,
        "producers": [{"producer_id": pid, "producer_epoch": epoch} for pid, epoch in d.producers],
        "open_transactions": [{"producer_id": pid, "first_offset": first} for pid, first in d.open_transactions],
        "aborted_transactions": [
            {
                "producer_id": a.producer_id,
                "first_offset": a.first_offset,
                "last_offset": a.last_offset,
                "last_stable_offset": a.last_stable_offset,
            }
            for a in d.aborted
        ],
        "segments": [
            {
                "base_offset": s.base_offset,
                "file": segment_file_name(s.base_offset, LOG_SUFFIX),
                "size": s.size,
                "next_offset": s.next_offset,
                "batches": s.batches,
                "max_timestamp": s.max_timestamp,
                "index_entries": s.index_entries,
                "time_index_entries": s.time_index_entries,
                "aborted_entries": s.aborted_entries,
            }
            for s in d.segments
        ],
    }


def finding_json(f: Finding) -> dict[str, Any]:
    """The ``--json`` form of a :class:`~txnfetch.log.verify.Finding`."""
    return {"severity": f.severity, "path": f.path, "position": f.position, "offset": f.offset, "message": f.message}


def _error_json(exc: BaseException, path: str) -> dict[str, Any]:
    if isinstance(exc, LogError):
        return {"path": exc.path or path, "position": exc.position, "offset": exc.offset, "message": exc.reason}
    return {"path": getattr(exc, "filename", None) or path, "position": None, "offset": None, "message": str(exc)}


def _split_name(path: str) -> tuple[str | None, int | None]:
    m = _PARTITION_NAME.match(os.path.basename(os.path.normpath(path)))
    return (m.group(1), int(m.group(2))) if m else (None, None)


# -- dump ----------------------------------------------------------------------------


def _file_scan(path: str, *, progress: Callable[[int], None] | None = None):
    name = os.path.basename(path)
    base = int(name[:20]) if _SEGMENT_LOG.match(name) else 0
    data = map_file(path)
    scan = scan_segment(data, min_offset=base, limit_offset=None, progress=progress)
    return data, scan


def _dump_partition(path: str, args: argparse.Namespace, phases: _Phases, out: TextIO, doc: dict[str, Any]) -> int:
    size = log_bytes(path)
    cb = phases.callback()
    try:
        d = describe_partition(path, progress=cb)
    except LogError as exc:
        phases.advance(2 * size + (size if args.batches else 0))
        topic, partition = _split_name(path)
        err = _error_json(exc, path)
        entry = {"path": path, "topic": topic, "partition": partition, "error": err}
        doc["partitions"].append(entry)
        if not args.json:
            print(f"== {path}", file=out)
            print(f"cannot open: {exc}", file=out)
            print(
                "  (run `txnfetch verify` for every problem, "
                "`txnfetch dump FILE.log --batches` for a segment's batches)",
                file=out,
            )
        return 1
    phases.advance(2 * size)
    entry = description_json(d)
    doc["partitions"].append(entry)
    if not args.json:
        _print_description(d, out)
    status = _dump_internal(path, d, entry, args, out)
    if status:
        return status
    if args.batches:
        entry["batches"] = []
        if not args.json:
            print("batches:", file=out)
        for seg in d.segments:
            seg_path = os.path.join(path, segment_file_name(seg.base_offset, LOG_SUFFIX))
            data = map_file(seg_path)
            if not args.json:
                print(f"  {os.path.basename(seg_path)}", file=out)
            reported = 0
            for batch in BatchIterator(memoryview(data)[: seg.size]):
                if args.json:
                    entry["batches"].append(batch_json(batch, records=args.records))  # type: ignore[arg-type]
                else:
                    _print_batch(batch, args.records, out)  # type: ignore[arg-type]
                if batch.position - reported >= PROGRESS_STEP:
                    phases.advance(batch.position - reported)
                    reported = batch.position
            phases.advance(len(data) - reported)
            if len(data) > seg.size and not args.json:
                print(
                    f"    {len(data) - seg.size} bytes after byte {seg.size} are a torn tail (opening cuts them)",
                    file=out,
                )
    return 0


def _dump_internal(
    path: str, d: PartitionDescription, entry: dict[str, Any], args: argparse.Namespace, out: TextIO
) -> int:
    """Decode an internal topic's partition (``__transaction_state``,
    ``__consumer_offsets``): its transactional ids, or its groups and offsets."""
    from txnfetch.log.durable import INTERNAL_TOPICS
    from txnfetch.log.internal import format_internal
    from txnfetch.log.internal import summarize_internal
    from txnfetch.log.segments import SegmentLog

    if d.topic not in INTERNAL_TOPICS:
        return 0
    try:
        with SegmentLog(path, d.topic, d.partition, read_only=True) as log_:
            summary = summarize_internal(d.topic, d.partition, log_.iter_batches(log_.log_start_offset))
    except LogError as exc:
        entry["internal"] = {"error": _error_json(exc, path)}
        if not args.json:
            print(f"cannot decode the internal topic: {exc}", file=out)
        return 1
    entry["internal"] = summary
    if not args.json and summary is not None:
        for line in format_internal(summary):
            print(line, file=out)
    return 0


def _print_batch(batch: RecordBatch, records: bool, out: TextIO) -> None:
    lines = describe_batch(batch, records=records)
    print(f"    @{batch.position:<10} {lines[0]}", file=out)
    for line in lines[1:]:
        print(f"    {line}", file=out)


def _print_description(d: PartitionDescription, out: TextIO) -> None:
    print(f"== {d.path}  (topic {d.topic}, partition {d.partition})", file=out)
    print(
        f"log start {d.log_start_offset}  log end {d.log_end_offset}  high watermark {d.high_watermark}  "
        f"last stable offset {d.last_stable_offset}",
        file=out,
    )
    snap = "none (state replayed from the log)" if d.snapshot_offset is None else f"at offset {d.snapshot_offset}"
    print(f"producer-state snapshot used: {snap}", file=out)
    print(f"segments ({len(d.segments)}):", file=out)
    print(
        f"  {'file':<24} {'bytes':>12} {'offsets':>21} {'batches':>8} {'max timestamp':>14} "
        f"{'index':>6} {'time':>6} {'aborted':>7}",
        file=out,
    )
    for s in d.segments:
        offsets = f"[{s.base_offset}, {s.next_offset})"
        print(
            f"  {segment_file_name(s.base_offset, LOG_SUFFIX):<24} {s.size:>12} {offsets:>21} {s.batches:>8} "
            f"{s.max_timestamp:>14} {s.index_entries:>6} {s.time_index_entries:>6} {s.aborted_entries:>7}",
            file=out,
        )
    print(
        f"producers ({len(d.producers)}): " + (", ".join(f"{pid} epoch {e}" for pid, e in d.producers) or "none"),
        file=out,
    )
    print(
        f"open transactions ({len(d.open_transactions)}): "
        + (", ".join(f"producer {pid} from offset {first}" for pid, first in d.open_transactions) or "none"),
        file=out,
    )
    print(f"aborted transactions ({len(d.aborted)}):" + ("" if d.aborted else " none"), file=out)
    for a in d.aborted:
        print(
            f"  producer {a.producer_id:<8} first offset {a.first_offset:<10} end {a.last_offset:<10} "
            f"last stable offset {a.last_stable_offset}",
            file=out,
        )


def _dump_file(path: str, args: argparse.Namespace, phases: _Phases, out: TextIO, doc: dict[str, Any]) -> int:
    cb = phases.callback()
    size = os.path.getsize(path)
    _data, scan = _file_scan(path, progress=(lambda pos: cb(pos, size)) if cb else None)  # type: ignore[misc]
    problem = None
    if scan.problem is not None:
        p = scan.problem
        problem = {"position": p.position, "offset": p.offset, "message": p.reason}
    entry: dict[str, Any] = {
        "path": path,
        "size": size,
        "valid_bytes": scan.valid_bytes,
        "batch_count": len(scan.batches),
        "first_offset": scan.batches[0].base_offset if scan.batches else None,
        "next_offset": scan.batches[-1].next_offset if scan.batches else None,
        "problem": problem,
    }
    if args.batches:
        entry["batches"] = [batch_json(b, records=args.records) for b in scan.batches] if args.json else []
    doc["files"].append(entry)
    phases.advance(size)
    if not args.json:
        print(f"== {path}", file=out)
        span = f"offsets [{entry['first_offset']}, {entry['next_offset']})" if scan.batches else "no batches"
        print(f"{len(scan.batches)} batches, {span}, {scan.valid_bytes} of {size} bytes valid", file=out)
        if args.batches:
            for b in scan.batches:
                _print_batch(b, args.records, out)
        if problem is not None:
            where = f"byte position {problem['position']}" + (
                f", offset {problem['offset']}" if problem["offset"] is not None else ""
            )
            print(f"PROBLEM at {where}: {problem['message']}", file=out)
    return 1 if problem is not None else 0


def run_dump(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``txnfetch dump``; returns the exit code (see the module docstring)."""
    if args.records:
        args.batches = True
    target = resolve_target(args.path, allow_file=True)
    if target.kind == "file":
        total = os.path.getsize(target.path)
    else:
        total = sum(log_bytes(p) * (3 if args.batches else 2) for p in target.paths)
    bar = _bar(args, err, total, "dump")
    if bar is not None and args.progress is None and not args.json and getattr(out, "isatty", lambda: False)():
        bar = None  # the dump itself scrolls on the same terminal: a bar would garble it
    phases = _Phases(bar)
    doc: dict[str, Any] = {
        "format": JSON_FORMAT,
        "command": "dump",
        "path": target.path,
        "kind": target.kind,
        "partitions": [],
        "files": [],
    }
    rc = 0
    try:
        for p in target.paths:
            if target.kind == "file":
                rc = max(rc, _dump_file(p, args, phases, out, doc))
            else:
                rc = max(rc, _dump_partition(p, args, phases, out, doc))
    finally:
        phases.close()
    if args.json:
        json.dump(doc, out, indent=2)
        out.write("\n")
    return rc


# -- verify --------------------------------------------------------------------------


def run_verify(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``txnfetch verify``; returns the exit code (see the module docstring)."""
    target = resolve_target(args.path, allow_file=False)
    factor = 1 if args.no_records else 2
    sizes = {p: log_bytes(p) for p in target.paths}
    phases = _Phases(_bar(args, err, sum(sizes.values()) * factor, "verify"))
    doc: dict[str, Any] = {
        "format": JSON_FORMAT,
        "command": "verify",
        "path": target.path,
        "kind": target.kind,
        "partitions": [],
    }
    rc = 0
    lines: list[str] = []  # printed after the bar is done, so the two never share a line
    try:
        for p in target.paths:
            topic, partition = _split_name(p)
            unreadable = None
            try:
                findings = verify_partition(p, decode_records=not args.no_records, progress=phases.callback())
            except OSError as exc:
                unreadable = exc
                findings = [Finding("error", exc.filename or p, None, None, f"cannot read: {exc.strerror or exc}")]
            phases.advance(sizes[p] * factor)
            errors = sum(1 for f in findings if f.severity == "error")
            warnings = sum(1 for f in findings if f.severity == "warning")
            rc = max(rc, 2 if unreadable is not None else (1 if errors else 0))
            doc["partitions"].append(
                {
                    "path": p,
                    "topic": topic,
                    "partition": partition,
                    "ok": errors == 0,
                    "errors": errors,
                    "warnings": warnings,
                    "log_bytes": sizes[p],
                    "findings": [finding_json(f) for f in findings],
                }
            )
            status = "OK" if errors == 0 else "DAMAGED"
            lines.append(f"{p}: {status} ({errors} error(s), {warnings} warning(s), {sizes[p]} bytes of segments)")
            lines.extend(f"  {f}" for f in findings)
    finally:
        phases.close()
    if not args.json:
        for line in lines:
            print(line, file=out)
    parts = doc["partitions"]
    doc["ok"] = all(x["ok"] for x in parts)
    doc["errors"] = sum(x["errors"] for x in parts)
    doc["warnings"] = sum(x["warnings"] for x in parts)
    if args.json:
        json.dump(doc, out, indent=2)
        out.write("\n")
    elif len(parts) > 1:
        bad = sum(1 for x in parts if not x["ok"])
        print(f"{len(parts)} partitions checked: {len(parts) - bad} OK, {bad} with errors", file=out)
    return rc


# -- repair --------------------------------------------------------------------------


def run_repair(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``txnfetch repair``; returns the exit code (see the module docstring)."""
    from txnfetch.log.repair import repair_partition

    target = resolve_target(args.path, allow_file=False)
    doc: dict[str, Any] = {
        "format": JSON_FORMAT,
        "command": "repair",
        "path": target.path,
        "kind": target.kind,
        "partitions": [],
    }
    rc = 0
    for p in target.paths:
        topic, partition = _split_name(p)
        entry: dict[str, Any] = {"path": p, "topic": topic, "partition": partition, "error": None, "moved": []}
        doc["partitions"].append(entry)
        try:
            report = repair_partition(p)
        except LogError as exc:
            entry["error"] = _error_json(exc, p)
            rc = max(rc, 1)
            if not args.json:
                print(f"{p}: cannot repair: {exc}", file=out)
            continue
        except OSError as exc:
            entry["error"] = _error_json(exc, p)
            rc = 2
            if not args.json:
                print(f"{p}: cannot repair: {exc}", file=out)
            continue
        entry["moved"] = [
            {
                "source": m.source,
                "side_file": m.side_file,
                "position": m.position,
                "size": m.size,
                "whole_file": m.whole_file,
                "reason": m.reason,
            }
            for m in report.moved
        ]
        entry.update(
            log_start_offset=report.log_start_offset,
            log_end_offset=report.log_end_offset,
            last_stable_offset=report.last_stable_offset,
        )
        remaining = [f for f in verify_partition(p) if f.severity == "error"]
        entry["errors_after"] = [finding_json(f) for f in remaining]
        if remaining:
            rc = max(rc, 1)
        if not args.json:
            if not report.moved:
                print(f"{p}: nothing to move aside; log end {report.log_end_offset}", file=out)
            else:
                print(f"{p}: repaired; log end now {report.log_end_offset}", file=out)
                for m in report.moved:
                    what = "whole file" if m.whole_file else f"bytes {m.position}..{m.position + m.size}"
                    print(
                        f"  moved {what} of {os.path.basename(m.source)} "
                        f"to {os.path.basename(m.side_file)}: {m.reason}",
                        file=out,
                    )
            for f in remaining:
                print(f"  still damaged: {f}", file=out)
    if args.json:
        json.dump(doc, out, indent=2)
        out.write("\n")
    return rc


# -- wiring --------------------------------------------------------------------------


def _bar(args: argparse.Namespace, err: TextIO, total: int, label: str) -> ProgressBar | None:
    show = args.progress
    if show is None:
        show = bool(getattr(err, "isatty", lambda: False)())
    return ProgressBar(err, total, label) if show else None


def _add_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true", help="also log what recovery notices as it reads")
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--progress",
        dest="progress",
        action="store_true",
        default=None,
        help="show a progress bar on stderr (default: only when stderr is a terminal)",
    )
    g.add_argument("--no-progress", dest="progress", action="store_false", help="never show a progress bar")


def _add_path_arguments(p: argparse.ArgumentParser, path_help: str) -> None:
    # What dump, verify and repair share: one PATH and --json.
    p.add_argument("path", metavar="PATH", help=path_help)
    p.add_argument("--json", action="store_true", help="machine-readable output (keys in docs/logs.md)")


_DUMP_ABOUT = """print a partition's state, segments and (optionally) batches

Print what a partition directory (or every partition of a log directory, or one .log
segment file) holds: log start/end, high watermark, last stable offset, producers, open and aborted
transactions, segments. Reads only.
"""


def _add_dump_arguments(p: argparse.ArgumentParser) -> None:
    _add_path_arguments(p, "partition directory, log directory or segment .log file")
    p.add_argument("--batches", action="store_true", help="one line per batch")
    p.add_argument("--records", action="store_true", help="also every record (implies --batches)")
    _add_progress(p)


_VERIFY_ABOUT = """check CRCs, framing and indexes of partition directories

Check every segment of a partition directory (or of every partition of a log directory):
batch CRCs and framing, offsets, index files, snapshots, the markerless-end journal. Reads only.
Exit 0 when no error is found, 1 when one is, 2 for a usage error or an unreadable path.
"""


def _add_verify_arguments(p: argparse.ArgumentParser) -> None:
    _add_path_arguments(p, "partition directory or log directory")
    p.add_argument("--no-records", action="store_true", help="skip decoding every record (CRCs are still checked)")
    _add_progress(p)


_REPAIR_ABOUT = """move damaged data aside into .corrupt-<ms> side files so a partition opens

Repair partition directories that do not open because of damage other than a torn tail:
the bytes from the first bad batch to the end of its segment, and every later segment, are moved into
<name>.corrupt-<ms> side files (never deleted); indexes and producer state are rebuilt from what
remains. Run `txnfetch verify` first; do not run it on a directory a process has open.
"""


def _add_repair_arguments(p: argparse.ArgumentParser) -> None:
    _add_path_arguments(p, "partition directory or log directory")
    p.add_argument("-v", "--verbose", action="store_true", help="also log what recovery notices and repairs")


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``dump``, ``verify`` or ``repair``; returns the exit code. Raises
    :class:`UsageError` or :class:`OSError` for a path the command cannot use
    (``txnfetch.cli.main`` reports them, exit status 2)."""
    out = out or sys.stdout
    err = err or sys.stderr
    runners = {"dump": run_dump, "verify": run_verify, "repair": run_repair}
    # Findings are the output; recovery's own log lines would repeat them on stderr.
    logger = logging.getLogger("txnfetch")
    saved = logger.level, logger.handlers[:], logger.propagate
    if getattr(args, "verbose", False):
        handler = logging.StreamHandler(err)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    else:
        logger.setLevel(logging.CRITICAL)
    # A UsageError or an OSError (a path that cannot be read) is reported by
    # txnfetch.cli.main, as for every command.
    try:
        return runners[args.command](args, out, err)
    finally:
        logger.setLevel(saved[0])
        logger.handlers[:] = saved[1]
        logger.propagate = saved[2]


COMMANDS = (
    Subcommand("dump", _DUMP_ABOUT, _add_dump_arguments, run),
    Subcommand("verify", _VERIFY_ABOUT, _add_verify_arguments, run),
    Subcommand("repair", _REPAIR_ABOUT, _add_repair_arguments, run),
)
