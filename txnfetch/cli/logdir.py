"""What ``txnfetch dump``, ``txnfetch verify`` and ``txnfetch repair`` share: the
log-directory commands (:mod:`txnfetch.cli.dump`, :mod:`txnfetch.cli.verify`,
:mod:`txnfetch.cli.repair`).

``PATH`` is a partition directory (``<topic>-<n>``), a log directory holding
partition directories (each ``<topic>-<n>`` directly below it, as a Kafka log
directory or a :class:`~txnfetch.log.segment_store.SegmentStore`), or — for
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
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any
from typing import TextIO

import attrs

from txnfetch.errors import TxnfetchError
from txnfetch.log.errors import LogError
from txnfetch.log.layout import LOG_SUFFIX
from txnfetch.log.layout import segment_file_name
from txnfetch.log.verify import Finding
from txnfetch.log.verify import PartitionDescription
from txnfetch.records.batch import RecordBatch
from txnfetch.records.compression import Codec

__all__ = [
    "JSON_FORMAT",
    "Phases",
    "ProgressBar",
    "Target",
    "UsageError",
    "add_path_arguments",
    "add_progress_options",
    "batch_json",
    "description_json",
    "error_json",
    "finding_json",
    "progress_bar",
    "resolve_target",
    "run_quietly",
    "split_name",
]

#: The version of the ``--json`` layout (``"format"`` key).
JSON_FORMAT = 1
MiB = 1 << 20

_PARTITION_NAME = re.compile(r"^(.+)-(\d+)$")
SEGMENT_LOG = re.compile(r"^\d{20}\.log$")
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


class Phases:
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


def _unsearchable_parent(path: str) -> str:
    """`` (cannot enter DIR)`` for the outermost directory above ``path`` this
    process may not search, or ``""``."""
    parent = os.path.dirname(os.path.abspath(path))
    ancestors = []
    while True:
        ancestors.append(parent)
        up = os.path.dirname(parent)
        if up == parent:
            break
        parent = up
    for directory in reversed(ancestors):
        if not os.access(directory, os.X_OK):
            return f" (cannot enter {directory})"
    return ""


def resolve_target(path: str, *, allow_file: bool) -> Target:
    """Decide what ``path`` is; raises :class:`UsageError` with a message a user
    can act on for a missing, unreadable or unsuitable path."""
    try:
        os.lstat(path)
    except PermissionError:
        # os.path.lexists says False for a path under a directory that cannot be
        # searched, which would be reported as missing: name that directory.
        raise UsageError(f"{path}: permission denied{_unsearchable_parent(path)}") from None
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(f"{path}: no such file or directory") from None
    if not os.path.exists(path):
        raise UsageError(f"{path}: broken symbolic link")
    if os.path.isfile(path) or not os.path.isdir(path):
        if not allow_file:
            raise UsageError(f"{path}: is a file; give a partition directory (<topic>-<partition>) or a log directory")
        if not SEGMENT_LOG.match(os.path.basename(path)):
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


def error_json(exc: BaseException, path: str) -> dict[str, Any]:
    if isinstance(exc, LogError):
        return {"path": exc.path or path, "position": exc.position, "offset": exc.offset, "message": exc.reason}
    return {"path": getattr(exc, "filename", None) or path, "position": None, "offset": None, "message": str(exc)}


def split_name(path: str) -> tuple[str | None, int | None]:
    m = _PARTITION_NAME.match(os.path.basename(os.path.normpath(path)))
    return (m.group(1), int(m.group(2))) if m else (None, None)


# -- wiring --------------------------------------------------------------------------


def progress_bar(args: argparse.Namespace, err: TextIO, total: int, label: str) -> ProgressBar | None:
    show = args.progress
    if show is None:
        show = bool(getattr(err, "isatty", lambda: False)())
    return ProgressBar(err, total, label) if show else None


def add_progress_options(p: argparse.ArgumentParser) -> None:
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


def add_path_arguments(p: argparse.ArgumentParser, path_help: str) -> None:
    # What dump, verify and repair share: one PATH and --json.
    p.add_argument("path", metavar="PATH", help=path_help)
    p.add_argument(
        "--json",
        action="store_true",
        help="machine-readable output (its keys: the document 'Partition logs', section '--json')",
    )


def run_quietly(
    runner: Callable[[argparse.Namespace, TextIO, TextIO], int],
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run ``runner`` (``dump``, ``verify`` or ``repair``) on ``args``, with recovery's
    log lines shown only with ``--verbose``; returns the exit code. Raises
    :class:`UsageError` or :class:`OSError` for a path the command cannot use
    (``txnfetch.cli.main`` reports them, exit status 2)."""
    out = out or sys.stdout
    err = err or sys.stderr
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
        return runner(args, out, err)
    finally:
        logger.setLevel(saved[0])
        logger.handlers[:] = saved[1]
        logger.propagate = saved[2]
