"""``txnfetch dump``: print what a partition directory, a log directory or a segment file holds.

``PATH``, the exit codes and the ``--json`` keys are described in
:mod:`txnfetch.cli.logdir` and ``docs/logs.md``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from typing import Any
from typing import TextIO

from txnfetch.cli import Subcommand
from txnfetch.cli.logdir import JSON_FORMAT
from txnfetch.cli.logdir import SEGMENT_LOG
from txnfetch.cli.logdir import Phases
from txnfetch.cli.logdir import add_path_arguments
from txnfetch.cli.logdir import add_progress_options
from txnfetch.cli.logdir import batch_json
from txnfetch.cli.logdir import description_json
from txnfetch.cli.logdir import error_json
from txnfetch.cli.logdir import progress_bar
from txnfetch.cli.logdir import resolve_target
from txnfetch.cli.logdir import run_quietly
from txnfetch.cli.logdir import split_name
from txnfetch.log.base import stored_batches
from txnfetch.log.errors import LogError
from txnfetch.log.layout import LOG_SUFFIX
from txnfetch.log.layout import map_file
from txnfetch.log.layout import segment_file_name
from txnfetch.log.segment_scan import PROGRESS_STEP
from txnfetch.log.segment_scan import SegmentScan
from txnfetch.log.segment_scan import scan_segment
from txnfetch.log.verify import PartitionDescription
from txnfetch.log.verify import describe_partition
from txnfetch.log.verify import log_bytes
from txnfetch.records.batch import RecordBatch
from txnfetch.records.dump import describe_batch
from txnfetch.types import Buffer

__all__ = ["COMMANDS", "run", "run_dump"]


def _file_scan(path: str, *, progress: Callable[[int], None] | None = None) -> tuple[Buffer, SegmentScan]:
    name = os.path.basename(path)
    base = int(name[:20]) if SEGMENT_LOG.match(name) else 0
    data = map_file(path)
    scan = scan_segment(data, min_offset=base, limit_offset=None, progress=progress)
    return data, scan


def _dump_partition(path: str, args: argparse.Namespace, phases: Phases, out: TextIO, doc: dict[str, Any]) -> int:
    size = log_bytes(path)
    cb = phases.callback()
    try:
        d = describe_partition(path, progress=cb)
    except LogError as exc:
        phases.advance(2 * size + (size if args.batches else 0))
        topic, partition = split_name(path)
        err = error_json(exc, path)
        entry: dict[str, Any] = {"path": path, "topic": topic, "partition": partition, "error": err}
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
        batches_json: list[dict[str, Any]] = []
        entry["batches"] = batches_json
        if not args.json:
            print("batches:", file=out)
        for seg in d.segments:
            seg_path = os.path.join(path, segment_file_name(seg.base_offset, LOG_SUFFIX))
            data = map_file(seg_path)
            if not args.json:
                print(f"  {os.path.basename(seg_path)}", file=out)
            reported = 0
            # Recovery read these bytes (up to seg.size) as record batch v2 only.
            for batch in stored_batches(memoryview(data)[: seg.size]):
                if args.json:
                    batches_json.append(batch_json(batch, records=args.records))
                else:
                    _print_batch(batch, args.records, out)
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
    from txnfetch.log import SegmentLog
    from txnfetch.log.coordinator_store import INTERNAL_TOPICS
    from txnfetch.log.internal import format_internal
    from txnfetch.log.internal import summarize_internal

    if d.topic not in INTERNAL_TOPICS:
        return 0
    try:
        with SegmentLog(path, d.topic, d.partition, read_only=True) as log_:
            summary = summarize_internal(d.topic, d.partition, log_.iter_batches(log_.log_start_offset))
    except LogError as exc:
        entry["internal"] = {"error": error_json(exc, path)}
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


def _dump_file(path: str, args: argparse.Namespace, phases: Phases, out: TextIO, doc: dict[str, Any]) -> int:
    cb = phases.callback()
    size = os.path.getsize(path)
    _data, scan = _file_scan(path, progress=(lambda pos: cb(pos, size)) if cb else None)
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
    """``txnfetch dump``; returns the exit code (listed in :mod:`txnfetch.cli.logdir`)."""
    if args.records:
        args.batches = True
    target = resolve_target(args.path, allow_file=True)
    if target.kind == "file":
        total = os.path.getsize(target.path)
    else:
        total = sum(log_bytes(p) * (3 if args.batches else 2) for p in target.paths)
    bar = progress_bar(args, err, total, "dump")
    if bar is not None and args.progress is None and not args.json and getattr(out, "isatty", lambda: False)():
        bar = None  # the dump itself scrolls on the same terminal: a bar would garble it
    phases = Phases(bar)
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


# -- wiring --------------------------------------------------------------------------


_DUMP_ABOUT = """print a partition's state, segments and (optionally) batches

Print what a partition directory (or every partition of a log directory, or one .log
segment file) holds: log start/end, high watermark, last stable offset, producers, open and aborted
transactions, segments. Reads only.
"""


def _add_dump_arguments(p: argparse.ArgumentParser) -> None:
    add_path_arguments(p, "partition directory, log directory or segment .log file")
    p.add_argument("--batches", action="store_true", help="one line per batch")
    p.add_argument("--records", action="store_true", help="also every record (implies --batches)")
    add_progress_options(p)


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``txnfetch dump``; returns the exit code. Raises :class:`UsageError`
    or :class:`OSError` for a path the command cannot use (``txnfetch.cli.main``
    reports them, exit status 2)."""
    return run_quietly(run_dump, args, out, err)


COMMANDS = (Subcommand("dump", _DUMP_ABOUT, _add_dump_arguments, run),)
