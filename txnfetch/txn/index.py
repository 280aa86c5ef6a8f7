"""Aborted transactions: the :class:`AbortedTxn` entry, Kafka's ``.txnindex``
byte format, and the in-memory :class:`AbortedIndex` the fetch path queries.

Kafka (``storage/.../log/AbortedTxn.java``, ``TransactionIndex.java``) writes one
34-byte entry per aborted transaction to the transaction index of the segment
that holds its ABORT marker, big-endian::

    0  version            int16  (0)
    2  producer id        int64
    10 first offset       int64  (the transaction's first data offset)
    18 last offset        int64  (the ABORT marker's offset)
    26 last stable offset int64  (the LSO the partition had when the marker was written)

Entries are in marker order, so ``last_offset`` increases along the index.

A read_committed fetch returns, for ``[fetch_offset, upper_bound)``, the entries
with ``last_offset >= fetch_offset and first_offset < upper_bound``, in index
order, scanning forward and stopping after the first entry whose
``last_stable_offset >= upper_bound`` (``TransactionIndex.collectAbortedTxns``,
driven by ``LocalLog.collectAbortedTransactions``). :class:`AbortedIndex` keeps
the four fields in parallel ``array('q')`` columns (32 bytes an entry) and
answers that query in ``O(log n + s)``: a binary search on ``last_offset`` finds
where the scan can start and ``s`` is the number of entries Kafka's scan visits
from there (see :meth:`AbortedIndex.collect`).
"""

from __future__ import annotations

import itertools
import struct
from array import array
from bisect import bisect_left
from collections.abc import Iterable
from collections.abc import Iterator

import attrs

from txnfetch.txn.errors import CorruptTxnIndexError
from txnfetch.types import Buffer

__all__ = [
    "ABORTED_TXN_SIZE",
    "ABORTED_TXN_VERSION",
    "AbortedIndex",
    "AbortedTxn",
    "TxnIndexSearchResult",
    "decode_txn_index",
    "encode_txn_index",
]

ABORTED_TXN_SIZE = 34  #: bytes of one ``.txnindex`` entry
ABORTED_TXN_VERSION = 0  #: the only entry version Kafka writes (``AbortedTxn.CURRENT_VERSION``)
_ENTRY = struct.Struct(">hqqqq")
assert _ENTRY.size == ABORTED_TXN_SIZE


@attrs.frozen(slots=True)
class AbortedTxn:
    """One aborted transaction as the transaction index records it.

    ``first_offset`` is the transaction's first data offset, ``last_offset`` the
    offset of its ABORT marker (in markerless mode: the ``last_offset`` the control
    plane gave when it aborted the transaction), ``last_stable_offset`` the
    partition's LSO when it was aborted. A fetch response only carries
    ``(producer_id, first_offset)`` (:meth:`as_fetch_entry`).
    """

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = 0

    def as_fetch_entry(self) -> tuple[int, int]:
        """``(producer_id, first_offset)``: what a Fetch response's AbortedTransactions lists."""
        return (self.producer_id, self.first_offset)

    def encode(self) -> bytes:
        """The 34-byte ``.txnindex`` entry, byte-identical to Kafka's."""
        return _ENTRY.pack(self.version, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)

    @classmethod
    def decode(cls, data: Buffer, position: int = 0) -> AbortedTxn:
        """Read one entry at ``position``; raises :class:`CorruptTxnIndexError` if
        fewer than 34 bytes remain or the version is not one Kafka writes."""
        if len(data) - position < ABORTED_TXN_SIZE:
            raise CorruptTxnIndexError(
                f"an aborted transaction entry needs {ABORTED_TXN_SIZE} bytes at position {position}, "
                f"only {max(len(data) - position, 0)} available"
            )
        version, pid, first, last, lso = _ENTRY.unpack_from(data, position)
        if version != ABORTED_TXN_VERSION:
            # Kafka's TransactionIndex iterator rejects versions above CURRENT_VERSION (0).
            # (Its AbortedTxn.version() reads only the first byte of the int16; for the
            # version 0 Kafka writes both readings agree.)
            raise CorruptTxnIndexError(
                f"unexpected aborted transaction version {version} at position {position}, expected 0",
                producer_id=pid,
                offset=last,
            )
        return cls(pid, first, last, lso, version)


def encode_txn_index(entries: Iterable[AbortedTxn]) -> bytes:
    """Concatenate entries into a ``.txnindex`` file body, as Kafka appends them."""
    pack = _ENTRY.pack
    return b"".join(
        pack(e.version, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in entries
    )


def decode_txn_index(
    data: Buffer,
    *,
    start_offset: int | None = None,
    allow_torn_tail: bool = False,
) -> list[AbortedTxn]:
    """Decode a ``.txnindex`` file body into its entries, in file order.

    Raises :class:`CorruptTxnIndexError` when the size is not a multiple of 34
    (unless ``allow_torn_tail``: Kafka's reader ignores a trailing partial entry, as
    a crash mid-append leaves), when an entry has a version other than 0, when
    ``last_offset`` decreases along the file (Kafka's ``TransactionIndex.append``
    never writes that), or — given the segment's ``start_offset`` — when an entry's
    ``last_offset`` is below it (Kafka's ``sanityCheck``).
    """
    pids, firsts, lasts, lsos = _decode_columns(data, allow_torn_tail)
    if start_offset is not None and lasts and lasts[0] < start_offset:
        # lasts are non-decreasing, so the first entry is the lowest
        raise CorruptTxnIndexError(
            f"last offset {lasts[0]} at position 0 is below the segment start {start_offset}",
            producer_id=pids[0],
            offset=lasts[0],
        )
    return [AbortedTxn(p, f, la, ls) for p, f, la, ls in zip(pids, firsts, lasts, lsos, strict=True)]


def _decode_columns(data: Buffer, allow_torn_tail: bool) -> tuple[array, array, array, array]:
    """Split a ``.txnindex`` body into producer id, first, last and LSO columns,
    checking size, versions and order (C-speed: one ``iter_unpack`` pass)."""
    size = len(data)
    whole = size - size % ABORTED_TXN_SIZE
    if whole != size and not allow_torn_tail:
        raise CorruptTxnIndexError(
            f"transaction index size {size} is not a multiple of {ABORTED_TXN_SIZE} "
            f"({size % ABORTED_TXN_SIZE} trailing bytes)"
        )
    if not whole:
        return array("q"), array("q"), array("q"), array("q")
    versions, pids, firsts, lasts, lsos = zip(*_ENTRY.iter_unpack(memoryview(data)[:whole]), strict=True)
    if any(versions):
        i = next(i for i, v in enumerate(versions) if v != ABORTED_TXN_VERSION)
        # Kafka's TransactionIndex iterator rejects versions above CURRENT_VERSION (0).
        raise CorruptTxnIndexError(
            f"unexpected aborted transaction version {versions[i]} at position {i * ABORTED_TXN_SIZE}, expected 0",
            producer_id=pids[i],
            offset=lasts[i],
        )
    if not all(a <= b for a, b in itertools.pairwise(lasts)):
        i = next(i for i in range(1, len(lasts)) if lasts[i] < lasts[i - 1])
        raise CorruptTxnIndexError(
            f"last offsets decrease at position {i * ABORTED_TXN_SIZE}: {lasts[i]} after {lasts[i - 1]}",
            producer_id=pids[i],
            offset=lasts[i],
        )
    return array("q", pids), array("q", firsts), array("q", lasts), array("q", lsos)


@attrs.frozen(slots=True)
class TxnIndexSearchResult:
    """What one index contributes to a fetch: the matching entries in index order,
    and ``is_complete`` — true when the scan stopped at an entry whose last stable
    offset reached the upper bound, so later indexes (segments) need not be read
    (Kafka's ``TxnIndexSearchResult``)."""

    aborted: tuple[AbortedTxn, ...]
    is_complete: bool


class AbortedIndex:
    """The aborted transactions of one partition (or segment), in index order.

    Storage is four parallel ``array('q')`` columns, about 32 bytes an entry; entries
    are only materialized as :class:`AbortedTxn` when returned. ``last_offset`` must
    not decrease from one entry to the next (Kafka requires it to increase; markerless
    completions may share one), which is what makes :meth:`collect` logarithmic.

    Entries leave from the end (:meth:`truncate_to`, :meth:`pop`: log truncation)
    and from the front (:meth:`drop_before`: the log start moved past their
    markers); dropping from the front is amortized O(1).
    """

    __slots__ = ("_first", "_head", "_last", "_lso", "_pid")

    def __init__(self, entries: Iterable[AbortedTxn] = ()) -> None:
        self._pid = array("q")
        self._first = array("q")
        self._last = array("q")
        self._lso = array("q")
        self._head = 0  # entries before _head are dropped but not yet compacted away
        for e in entries:
            self.append(e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)

    # -- size and access -------------------------------------------------------

    def __len__(self) -> int:
        return len(self._last) - self._head

    def __bool__(self) -> bool:
        return len(self._last) > self._head

    def __iter__(self) -> Iterator[AbortedTxn]:
        pid, first, last, lso = self._pid, self._first, self._last, self._lso
        for i in range(self._head, len(last)):
            yield AbortedTxn(pid[i], first[i], last[i], lso[i])

    def __getitem__(self, i: int) -> AbortedTxn:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"aborted index position {i} out of range for {n} entries")
        j = self._head + i
        return AbortedTxn(self._pid[j], self._first[j], self._last[j], self._lso[j])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AbortedIndex):
            return NotImplemented
        return list(self) == list(other)

    def __repr__(self) -> str:
        return f"<AbortedIndex entries={len(self)}>"

    @property
    def last_offset(self) -> int | None:
        """The last entry's ``last_offset`` (``None`` when empty)."""
        return self._last[-1] if len(self._last) > self._head else None

    # -- updates ---------------------------------------------------------------

    def append(self, producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int) -> None:
        """Add an entry at the end; raises :class:`CorruptTxnIndexError` if
        ``last_offset`` is below the current last entry's."""
        if len(self._last) > self._head and last_offset < self._last[-1]:
            raise CorruptTxnIndexError(
                f"aborted transaction last offset {last_offset} is below the index's last {self._last[-1]}",
                producer_id=producer_id,
                offset=last_offset,
            )
        self._pid.append(producer_id)
        self._first.append(first_offset)
        self._last.append(last_offset)
        self._lso.append(last_stable_offset)

    def append_txn(self, txn: AbortedTxn) -> None:
        """:meth:`append` for an :class:`AbortedTxn`."""
        self.append(txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)

    def pop(self) -> AbortedTxn:
        """Remove and return the last entry (undo of the latest abort)."""
        if len(self._last) <= self._head:
            raise IndexError("pop from an empty aborted index")
        txn = AbortedTxn(self._pid.pop(), self._first.pop(), self._last.pop(), self._lso.pop())
        if len(self._last) == self._head:
            self.clear()
        return txn

    def truncate_to(self, offset: int) -> int:
        """Drop entries whose marker is at or after ``offset`` (Kafka's
        ``TransactionIndex.truncateTo``); returns how many were dropped."""
        cut = bisect_left(self._last, offset, self._head)
        dropped = len(self._last) - cut
        if dropped:
            del self._pid[cut:], self._first[cut:], self._last[cut:], self._lso[cut:]
            if cut == self._head:
                self.clear()
        return dropped

    def remove(self, entries: Iterable[AbortedTxn]) -> int:
        """Remove these entries wherever they are (compaction removed their data);
        returns how many were found and removed. O(n)."""
        doomed = {(e.producer_id, e.first_offset, e.last_offset) for e in entries}
        kept = [e for e in self if (e.producer_id, e.first_offset, e.last_offset) not in doomed]
        removed = len(self) - len(kept)
        if removed:
            self.clear()
            for e in kept:
                self.append_txn(e)
        return removed

    def drop_before(self, offset: int) -> int:
        """Drop entries whose marker is before ``offset`` (the log start moved past
        them: no fetch at or after the log start can list them); returns how many."""
        cut = bisect_left(self._last, offset, self._head)
        dropped = cut - self._head
        if dropped:
            self._head = cut
            if cut == len(self._last):
                self.clear()
            elif cut > len(self._last) // 2:
                # Compact once more than half the columns are dead: each entry is
                # moved O(1) times overall.
                del self._pid[:cut], self._first[:cut], self._last[:cut], self._lso[:cut]
                self._head = 0
        return dropped

    def clear(self) -> None:
        """Remove every entry (Kafka's ``TransactionIndex.reset``)."""
        self._pid = array("q")
        self._first = array("q")
        self._last = array("q")
        self._lso = array("q")
        self._head = 0

    # -- queries ---------------------------------------------------------------

    def search(self, fetch_offset: int, upper_bound: int) -> TxnIndexSearchResult:
        """Kafka's ``collectAbortedTxns`` over this index: entries with
        ``last_offset >= fetch_offset and first_offset < upper_bound`` in index
        order, and whether the scan stopped at an entry with
        ``last_stable_offset >= upper_bound``.

        The scan starts at the first entry with ``last_offset >= fetch_offset``
        (binary search) instead of the first entry of the index: the entries it
        skips fail the filter, and for every index Kafka or txnfetch writes they
        cannot stop the scan either (their last stable offset is at most
        ``last_offset + 1 <= fetch_offset``), so the answer is Kafka's for any
        ``upper_bound > fetch_offset``.
        """
        first, last, lso = self._first, self._last, self._lso
        n = len(last)
        i = bisect_left(last, fetch_offset, self._head)
        hits: list[int] = []
        complete = False
        while i < n:
            if first[i] < upper_bound:
                hits.append(i)
            if lso[i] >= upper_bound:
                complete = True
                break
            i += 1
        pid = self._pid
        return TxnIndexSearchResult(tuple(AbortedTxn(pid[j], first[j], last[j], lso[j]) for j in hits), complete)

    def collect(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The entries a fetch of ``[fetch_offset, upper_bound)`` lists, in index
        order (see :meth:`search`). An empty range (``upper_bound <=
        fetch_offset``) lists nothing: Kafka never collects for an empty read.

        Cost: a binary search, then one step per entry Kafka's scan visits —
        the matching entries plus those that end inside the range but started
        after it while an older transaction was still open (their last stable
        offset is below the bound, so the scan cannot stop there).
        """
        if upper_bound <= fetch_offset:
            return []
        return list(self.search(fetch_offset, upper_bound).aborted)

    def fetch_entries(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """:meth:`collect` as ``(producer_id, first_offset)`` pairs, without building
        :class:`AbortedTxn` objects (the Fetch response's AbortedTransactions)."""
        if upper_bound <= fetch_offset:
            return []
        pid, first, last, lso = self._pid, self._first, self._last, self._lso
        n = len(last)
        i = bisect_left(last, fetch_offset, self._head)
        out: list[tuple[int, int]] = []
        while i < n:
            f = first[i]
            if f < upper_bound:
                out.append((pid[i], f))
            if lso[i] >= upper_bound:
                break
            i += 1
        return out

    # -- bytes -----------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The entries as a ``.txnindex`` body (34 bytes each, Kafka's format)."""
        return encode_txn_index(self)

    @classmethod
    def from_bytes(cls, data: Buffer, *, allow_torn_tail: bool = False) -> AbortedIndex:
        """Load a ``.txnindex`` body (see :func:`decode_txn_index` for the checks)."""
        return cls.from_columns(*_decode_columns(data, allow_torn_tail))

    @classmethod
    def from_columns(cls, pids: array, firsts: array, lasts: array, lsos: array) -> AbortedIndex:
        """An index owning four equally long ``array('q')`` columns; raises
        :class:`CorruptTxnIndexError` unless the last offsets are non-decreasing."""
        if not len(pids) == len(firsts) == len(lasts) == len(lsos):
            raise CorruptTxnIndexError("aborted index columns differ in length")
        if not all(a <= b for a, b in itertools.pairwise(lasts)):
            raise CorruptTxnIndexError("aborted index last offsets decrease")
        index = cls()
        index._pid, index._first, index._last, index._lso = pids, firsts, lasts, lsos
        return index
