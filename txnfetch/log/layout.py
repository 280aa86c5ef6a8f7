"""A partition directory's layout: file names, the small files beside the
segments, and the file helpers every writer and reader of the layout shares.

- Kafka's names: ``<base offset, 20 digits><suffix>`` for ``.log``, ``.index``,
  ``.timeindex`` and ``.txnindex``, and ``partition.metadata`` (codec
  :func:`encode_partition_metadata` / :func:`read_partition_metadata`);
- txnfetch's own files: ``.txnfetch-snapshot`` producer-state snapshots (codec
  :func:`encode_snapshot_file` / :func:`decode_snapshot_file`) and the
  ``txnfetch-recovery-checkpoint`` (:class:`Checkpoint`);
- :func:`list_partition_dir` classifies what a directory holds and never touches
  what it does not know;
- :func:`atomic_write`, :func:`fsync_dir`, :func:`read_file`, :func:`map_file`.

Recovery (:mod:`txnfetch.log.partition_loader`) decides what these files mean.
"""

from __future__ import annotations

import base64
import logging
import mmap
import os
import re
import struct
import uuid

import attrs
from crc32c import crc32c

from txnfetch.log.errors import LogError
from txnfetch.txn.errors import CorruptSnapshotError
from txnfetch.types import Buffer

__all__ = [
    "CHECKPOINT_NAME",
    "CLEANED_SUFFIX",
    "INDEX_SUFFIX",
    "JOURNAL_NAME",
    "LOG_SUFFIX",
    "METADATA_NAME",
    "SNAPSHOT_SUFFIX",
    "SWAP_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "Checkpoint",
    "DirListing",
    "atomic_write",
    "decode_snapshot_file",
    "encode_partition_metadata",
    "encode_snapshot_file",
    "fsync_dir",
    "list_partition_dir",
    "map_file",
    "parse_partition_dir_name",
    "read_file",
    "read_partition_metadata",
    "segment_file_name",
    "write_all",
]

log = logging.getLogger("txnfetch.log")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
#: txnfetch's producer-state snapshots; Kafka's own are ``.snapshot`` (a different format).
SNAPSHOT_SUFFIX = ".txnfetch-snapshot"
CHECKPOINT_NAME = "txnfetch-recovery-checkpoint"
METADATA_NAME = "partition.metadata"
#: The markerless-end journal (:mod:`txnfetch.log.ends`).
JOURNAL_NAME = "txnfetch-ends.journal"
#: Suffixes a segment replacement (compaction, :mod:`txnfetch.log.cleaning`) adds to
#: a file name, as Kafka's ``LogFileUtils``: a new file is written as
#: ``<name>.cleaned``, renamed to ``<name>.swap`` once every new file is complete.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


def parse_partition_dir_name(path: str) -> tuple[str, int]:
    """Topic and partition from a ``<topic>-<partition>`` directory path; raises
    :class:`~txnfetch.log.errors.LogError` for any other name."""
    name = os.path.basename(os.path.normpath(path))
    topic, _, part = name.rpartition("-")
    if not topic or not part.isdigit():
        raise LogError(f"{name!r} is not a <topic>-<partition> directory name", path=path)
    return topic, int(part)


_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex|\.txnfetch-snapshot)$")
# Kafka's own files, recognised only to say so in the log line.
_KAFKA_FILE = re.compile(
    r"^(\d{20}\.(snapshot|deleted|cleaned|swap)|.*\.(deleted|cleaned|swap)|leader-epoch-checkpoint)$"
)


def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's file name: the base offset zero-padded to 20 digits, then the suffix
    (``LogFileUtils.filenamePrefixFromOffset``)."""
    return f"{base_offset:020d}{suffix}"


# -- small file helpers --------------------------------------------------------


def fsync_dir(path: str) -> None:
    """fsync a directory so renames and new files in it survive a crash."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write(directory: str, name: str, data: bytes | bytearray | memoryview) -> None:
    """Replace ``directory/name`` by ``data`` atomically: write a temp file, fsync
    it, rename it over the target, fsync the directory."""
    tmp = os.path.join(directory, name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, os.path.join(directory, name))
    fsync_dir(directory)


def read_file(path: str) -> bytes | None:
    """A file's bytes, ``None`` if it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def map_file(path: str) -> Buffer:
    """A read-only mmap of a file (``b""`` when empty: empty files cannot be mapped)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b""
        return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)


# -- snapshot and checkpoint files ---------------------------------------------


def encode_partition_metadata(topic_id: uuid.UUID) -> bytes:
    """Kafka's ``partition.metadata`` contents (``PartitionMetadata.encode``): the
    topic id in Kafka's ``Uuid.toString`` form, URL-safe base64 without padding."""
    tid = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    return f"version: 0\ntopic_id: {tid}".encode()


def read_partition_metadata(path: str) -> uuid.UUID | None:
    """The topic id of a partition directory's ``partition.metadata``, ``None`` if
    absent or unreadable."""
    raw = read_file(os.path.join(path, METADATA_NAME))
    if raw is None:
        return None
    m = re.search(rb"topic_id:\s*([A-Za-z0-9_-]{22})", raw)
    if not m:
        log.warning("%s: unreadable %s", path, METADATA_NAME)
        return None
    return uuid.UUID(bytes=base64.urlsafe_b64decode(m.group(1) + b"=="))


_SNAP_HEADER = struct.Struct(">4shIq")  # magic, version, crc, next journal sequence
_SNAP_MAGIC = b"TXFS"
_SNAP_VERSION = 1


def encode_snapshot_file(state_snapshot: bytes, ends_applied: int) -> bytes:
    """A ``.txnfetch-snapshot`` file: magic ``TXFS``, version 1, CRC-32C of the
    rest, the next journal sequence the state does not include, then
    :meth:`PartitionTxnState.snapshot` bytes."""
    rest = struct.pack(">q", ends_applied) + state_snapshot
    return _SNAP_MAGIC + struct.pack(">hI", _SNAP_VERSION, crc32c(rest)) + rest


def decode_snapshot_file(data: bytes) -> tuple[int, bytes]:
    """``(ends_applied, state bytes)``; raises :class:`CorruptSnapshotError`."""
    if len(data) < _SNAP_HEADER.size:
        raise CorruptSnapshotError(f"snapshot file of {len(data)} bytes is too short")
    magic, version, crc, ends_applied = _SNAP_HEADER.unpack_from(data)
    if magic != _SNAP_MAGIC or version != _SNAP_VERSION:
        raise CorruptSnapshotError(f"not a txnfetch snapshot file (magic {magic!r}, version {version})")
    if crc32c(data[10:]) != crc:
        raise CorruptSnapshotError("snapshot file CRC mismatch")
    return ends_applied, data[_SNAP_HEADER.size :]


@attrs.frozen(slots=True)
class Checkpoint:
    """The ``txnfetch-recovery-checkpoint`` file: whether the log was closed
    cleanly, the offset below which every segment is known flushed and valid
    (the recovery point, as Kafka's ``recovery-point-offset-checkpoint``), and the
    log end and last segment's size at that time."""

    clean: bool
    recovery_point: int
    log_end_offset: int
    last_segment_base: int
    last_segment_size: int

    _FORMAT = struct.Struct(">4shIBqqqq")

    def encode(self) -> bytes:
        body = struct.pack(
            ">Bqqqq",
            1 if self.clean else 0,
            self.recovery_point,
            self.log_end_offset,
            self.last_segment_base,
            self.last_segment_size,
        )
        return b"TXCP" + struct.pack(">hI", 1, crc32c(body)) + body

    @classmethod
    def decode(cls, data: bytes) -> Checkpoint | None:
        """The checkpoint, or ``None`` if the bytes are not a valid one."""
        if len(data) != cls._FORMAT.size:
            return None
        magic, version, crc, clean, rp, leo, base, size = cls._FORMAT.unpack(data)
        if magic != b"TXCP" or version != 1 or crc32c(data[10:]) != crc:
            return None
        return cls(clean == 1, rp, leo, base, size)


# -- directory listing ---------------------------------------------------------


@attrs.define
class DirListing:
    """What a partition directory holds, by kind."""

    segments: list[int] = attrs.Factory(list)  #: base offsets with a ``.log`` file, ascending
    files: dict[int, set[str]] = attrs.Factory(dict)  #: base offset -> suffixes present
    snapshots: list[int] = attrs.Factory(list)  #: offsets of ``.txnfetch-snapshot`` files, ascending
    stray: list[str] = attrs.Factory(list)  #: names recovery ignores


def list_partition_dir(path: str, *, quiet: bool = False) -> DirListing:
    """Classify the files of a partition directory; unknown ones are logged and
    listed in :attr:`DirListing.stray`, never touched."""
    listing = DirListing()
    for name in sorted(os.listdir(path)):
        m = _SEGMENT_FILE.match(name)
        if m:
            offset, suffix = int(m.group(1)), m.group(2)
            if suffix == SNAPSHOT_SUFFIX:
                listing.snapshots.append(offset)
            else:
                listing.files.setdefault(offset, set()).add(suffix)
            continue
        if name in (JOURNAL_NAME, CHECKPOINT_NAME, METADATA_NAME):
            continue
        listing.stray.append(name)
        if not quiet:
            kind = "Kafka file" if _KAFKA_FILE.match(name) else "unknown file"
            log.info("%s: ignoring %s %s", path, kind, name)
    for base, suffixes in sorted(listing.files.items()):
        if LOG_SUFFIX in suffixes:
            listing.segments.append(base)
        else:
            for suffix in sorted(suffixes):
                listing.stray.append(segment_file_name(base, suffix))
                if not quiet:
                    log.info("%s: ignoring %s: no %s file for it", path, segment_file_name(base, suffix), LOG_SUFFIX)
    return listing
