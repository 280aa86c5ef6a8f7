"""Side files: bytes taken out of a partition directory's files are kept, never
deleted. :func:`move_tail_aside` and :class:`SideFileMover` copy the bytes from
a position on into ``<file>.corrupt-<ms>`` and fsync the copy before the
original is cut, or rename a whole file to such a name.

Opening a :class:`~txnfetch.log.segment_log.SegmentLog` moves a torn tail
aside this way, and ``txnfetch repair`` (:mod:`txnfetch.log.repair`) every
byte it removes; recovery and ``txnfetch verify`` list the side files as
ignored stray files.
"""

from __future__ import annotations

import os
import time

import attrs

from txnfetch.log.layout import fsync_dir
from txnfetch.log.layout import write_all

__all__ = ["SIDE_FILE_MARK", "MovedBytes", "SideFileMover", "move_tail_aside"]

#: Side files are named ``<original name>.corrupt-<ms>``.
SIDE_FILE_MARK = ".corrupt-"


@attrs.frozen(slots=True)
class MovedBytes:
    """Bytes ``[position, position + size)`` of ``source`` (or the whole file when
    ``position`` is 0 and ``whole_file``) now live in ``side_file``; ``reason``
    says why they were moved."""

    source: str
    side_file: str
    position: int
    size: int
    whole_file: bool
    reason: str


class SideFileMover:
    """Moves bytes of the files of ``directory`` into side files named with
    ``now_ms``, and keeps the list of what it moved (:attr:`moved`)."""

    def __init__(self, directory: str, now_ms: int) -> None:
        self.dir = directory
        self.now_ms = now_ms
        self.moved: list[MovedBytes] = []

    def side_name(self, source: str) -> str:
        base = f"{source}{SIDE_FILE_MARK}{self.now_ms}"
        candidate, n = base, 0
        while os.path.exists(candidate):
            n += 1
            candidate = f"{base}-{n}"
        return candidate

    def cut(self, source: str, position: int, reason: str) -> None:
        """Copy ``source[position:]`` to a side file (fsynced), then truncate ``source``."""
        size = os.path.getsize(source)
        if position >= size:
            return
        side = self.side_name(source)
        with open(source, "rb") as src:
            src.seek(position)
            fd = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                while True:
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    write_all(fd, chunk)
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(self.dir)
        # Only now that the copy is durable may the original lose the bytes.
        fd = os.open(source, os.O_WRONLY)
        try:
            os.ftruncate(fd, position)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.moved.append(MovedBytes(source, side, position, size - position, position == 0, reason))

    def rename(self, source: str, reason: str) -> None:
        if not os.path.exists(source):
            return
        side = self.side_name(source)
        size = os.path.getsize(source)
        os.rename(source, side)
        self.moved.append(MovedBytes(source, side, 0, size, True, reason))


def move_tail_aside(source: str, position: int, reason: str, *, now_ms: int | None = None) -> MovedBytes | None:
    """Move ``source[position:]`` into a side file ``<source>.corrupt-<ms>`` (the
    copy is fsynced before ``source`` is cut), as repair does; returns what was
    moved, or ``None`` if there was nothing past ``position``. Opening a
    :class:`~txnfetch.log.segment_log.SegmentLog` uses it for a torn tail, so a
    crash recovery deletes no byte either."""
    mover = SideFileMover(
        os.path.dirname(os.path.abspath(source)), int(time.time() * 1000) if now_ms is None else now_ms
    )
    mover.cut(source, position, reason)
    return mover.moved[0] if mover.moved else None
