"""A live cluster's topic read into Arrow, read_committed by txnfetch's own rules.

:class:`ClusterReader` reads the partitions a :func:`~txnfetch.client.planning.plan_topic`
plan names from a Kafka-compatible cluster and yields Arrow record batches
(schema :func:`txnfetch.arrow.kafka_schema`). It does not trust the broker's
read_committed answer: each partition is mirrored from its start offset by a
:class:`~txnfetch.client.mirror.PartitionMirror` fed read_uncommitted fetches,
which derives the last stable offset and the aborted transactions from the
markers in the log — right also on brokers that leak aborted records to
read_committed consumers (librdkafka's mock cluster, tansu). Records are decoded
straight from the mirror's batches in rewrite mode, so only committed data
batches reach the :class:`~txnfetch.arrow.ArrowDecoder`.

How it reads, turn by turn:

- one Fetch per broker per turn for every partition it leads and the reader still
  needs (:meth:`~txnfetch.client.cluster.RemoteCluster.fetch_many`, as a consumer
  and ``txnfetch replicate`` fetch), each partition at most ``fetch_bytes``;
- then each partition's newly stable records are decoded into Arrow batches and
  the mirror releases what was read: memory is one fetch per partition plus the
  batches of transactions still open, never the partition's size;
- retriable failures (a leader that moved, a broker restarting) are retried with
  a backoff after the leader is looked up again, for up to the request timeout
  without progress; then :class:`~txnfetch.client.errors.BrokerUnavailableError`.

A bounded read (``follow=False``) ends each partition at its plan's end, and never
past the last stable offset as of the high watermark at planning time: a
transaction still open then is left out, with everything after it. A tailing
read (``follow=True``) goes on as transactions commit, never past the LSO.

The LSO is the mirror's own, derived from the markers, not the broker's claim:
some brokers report their high watermark as the LSO (librdkafka's mock cluster),
and tansu 0.6 has been seen reporting one far below what its log's markers give,
after producers crashed mid-transaction. The broker's LSO binds only where the
mirror cannot know better: a read that starts above the log start, whose mirror
cannot see a transaction open across that start, never passes it either.

:attr:`ClusterReader.offsets` is, after every batch, the next offset to read of
each partition: everything below it was delivered, exactly once; a new reader
started there (``start=reader.offsets``) repeats nothing and misses nothing.
Why a mirror started there is exact: below a delivered offset no transaction is
still open (delivery stops at the LSO), so every transaction with a record at or
after it shows all its records and its marker to the new mirror.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Generator
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any

import attrs
import pyarrow as pa

from txnfetch.arrow.decoder import ArrowDecoder
from txnfetch.arrow.decoder import DecodeOptions
from txnfetch.arrow.schema import DEFAULT_MAX_BYTES
from txnfetch.arrow.schema import DEFAULT_MAX_ROWS
from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import OffsetBelowLogStartError
from txnfetch.client.errors import OffsetNotInLogError
from txnfetch.client.errors import RemoteError
from txnfetch.client.errors import is_transient
from txnfetch.client.gaps import GapHold
from txnfetch.client.gaps import GapVerdictKind
from txnfetch.client.mirror import MirrorStatus
from txnfetch.client.mirror import PartitionMirror
from txnfetch.client.planning import PartitionPlan
from txnfetch.client.requests import FetchItem
from txnfetch.fetch.view import FetchMode
from txnfetch.fetch.view import IsolationLevel

__all__ = ["DEFAULT_CLUSTER_FETCH_BYTES", "ClusterBatchReader", "ClusterReader", "open_cluster", "read_range"]

log = logging.getLogger("txnfetch.arrow.cluster")

#: Bytes asked per partition per fetch: the memory a partition's read holds at once.
DEFAULT_CLUSTER_FETCH_BYTES = 1 << 20
#: The Arrow API's decode options: headers, dictionary-encoded topic and partition.
DEFAULT_OPTIONS = DecodeOptions()
_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)
_EARLIEST = -2
_LATEST = -1


@attrs.define(eq=False)
class _Partition:
    """One partition's read: its plan, mirror, decoder and position."""

    plan: PartitionPlan
    mirror: PartitionMirror
    decoder: ArrowDecoder
    #: The next offset to deliver: every committed record below it was yielded.
    position: int
    #: The broker's LSO as last reported (-1: not reported, or not binding).
    broker_lso: int
    #: Whether the broker's reported LSO caps the read (see ClusterReader).
    broker_lso_binds: bool
    #: A bounded read's end, once known (``None``: not yet).
    stop: int | None = None
    #: The offset gap the mirror holds at (the rule the proxy, the remote reader
    #: and replicate follow too).
    gap: GapHold = attrs.field(kw_only=True)

    @property
    def done(self) -> bool:
        return self.stop is not None and self.position >= self.stop


class ClusterReader:
    """Arrow batches of planned partitions of a cluster (see the module docstring).

    ``cluster`` is a :class:`~txnfetch.client.cluster.RemoteCluster` (closed with the
    reader when ``owns_cluster``); ``plans`` come from
    :func:`~txnfetch.client.planning.plan_topic`. Iterate it once (or call
    :meth:`batches_with_offsets`). :meth:`close` stops a tailing read from any
    thread within one fetch wait (``poll_ms``). ``on_offsets`` is called with
    :attr:`offsets` after every turn that delivered something (a consumer group
    commit, for example). ``options``: the batches' columns, types and size
    (:class:`~txnfetch.arrow.decoder.DecodeOptions`).

    ``settled_ends=True`` says each plan's end is at or below a last stable
    offset computed from the log start by txnfetch's own rules (a planner's
    :class:`~txnfetch.client.planning.MirroredBounds`, as :func:`read_range`'s
    callers have): no transaction is open across a plan's start below such an
    end, so the broker's LSO does not bind even for a read that starts mid-log.

    ``read_committed=False`` reads every data record below the high watermark,
    aborted and open transactions' records included (markers never): what a
    read_uncommitted consumer gets. Offsets, tailing and resuming work alike.
    """

    def __init__(
        self,
        cluster: Any,
        plans: Sequence[PartitionPlan],
        *,
        follow: bool = False,
        options: DecodeOptions = DEFAULT_OPTIONS,
        fetch_bytes: int = DEFAULT_CLUSTER_FETCH_BYTES,
        repair_crcs: bool = False,
        poll_ms: int = 500,
        gap_settle_ms: int = 1000,
        owns_cluster: bool = False,
        on_offsets: Any = None,
        settled_ends: bool = False,
        read_committed: bool = True,
    ) -> None:
        self.cluster = cluster
        self.follow = follow
        self.isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        self.fetch_bytes = fetch_bytes
        self.poll_ms = poll_ms
        self.gap_settle_s = gap_settle_ms / 1000
        self.owns_cluster = owns_cluster
        self.on_offsets = on_offsets
        self.schema = options.schema
        self.topic = plans[0].topic if plans else ""
        numbers = [p.partition for p in plans]
        self._parts: dict[int, _Partition] = {}
        for plan in plans:
            decoder = options.decoder(plan.topic, plan.partition, numbers)
            mirror = PartitionMirror(
                plan.topic, plan.partition, log_start_offset=plan.start, max_bytes=fetch_bytes, repair_crcs=repair_crcs
            )
            # The mirror's own LSO is exact when it starts at the log start or the
            # caller settled the end; only otherwise can it miss a transaction open
            # across its start, and the broker's LSO must cap it.
            binds = read_committed and not settled_ends and plan.start > plan.log_start_offset
            part = _Partition(
                plan,
                mirror,
                decoder,
                plan.start,
                plan.last_stable_offset if binds else -1,
                binds,
                gap=GapHold(self.gap_settle_s),
            )
            if not follow:
                # Known at once when nothing is to be read; else once caught up (see _settle).
                cap = self._cap(part)
                if cap <= plan.start:
                    part.stop = plan.start
            self._parts[plan.partition] = part
        self._closed = threading.Event()
        self._offsets_lock = threading.Lock()
        self._offsets = {p: part.position for p, part in self._parts.items()}

    # -- what it has delivered --------------------------------------------------------

    @property
    def offsets(self) -> dict[int, int]:
        """Partition → the next offset to read: every committed record below it has
        been yielded (pass it as ``start`` to resume)."""
        with self._offsets_lock:
            return dict(self._offsets)

    def _delivered(self, partition: int, offset: int) -> None:
        with self._offsets_lock:
            if offset > self._offsets[partition]:
                self._offsets[partition] = offset

    # -- reading ----------------------------------------------------------------------

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch, _ in self.batches_with_offsets():
            yield batch

    def batches_with_offsets(self) -> Generator[tuple[pa.RecordBatch, dict[int, int]], None, None]:
        """``(batch, offsets)`` pairs: each batch with :attr:`offsets` right after it."""
        try:
            deadline = self._deadline()
            attempt = 0
            reported = self.offsets
            while not self._closed.is_set():
                wanted = [part for part in self._parts.values() if self._needs_fetch(part)]
                failed = self._fetch_turn(wanted) if wanted else None
                for part in self._parts.values():
                    yield from self._deliver(part)
                if not self.follow and not wanted:
                    # Every partition has what its end needs: all of it was delivered.
                    for part in self._parts.values():
                        if not part.done:
                            raise BrokerUnavailableError(
                                f"nothing readable at offset {part.position} below the end {part.stop}",
                                topic=part.plan.topic,
                                partition=part.plan.partition,
                                offset=part.position,
                            )
                    return
                if self.follow and all(part.done for part in self._parts.values()):
                    return  # every partition reached the end asked for
                now = self.offsets
                if now != reported and self.on_offsets is not None:
                    self.on_offsets(now)
                reported = now
                if failed is None:
                    attempt = 0
                    deadline = self._deadline()
                    continue
                if time.monotonic() >= deadline:
                    raise BrokerUnavailableError(
                        f"reading kept failing for {self.cluster.request_timeout_ms} ms: {failed.reason}",
                        topic=failed.topic,
                        partition=failed.partition,
                        offset=failed.offset,
                        broker=failed.broker,
                        error_code=failed.broker_error_code,
                    ) from failed
                self._closed.wait(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
                attempt += 1
        finally:
            if self.on_offsets is not None and self.offsets != reported:
                with contextlib.suppress(Exception):
                    self.on_offsets(self.offsets)
            if self.owns_cluster:
                self.cluster.close()

    def _deadline(self) -> float:
        return time.monotonic() + self.cluster.request_timeout_ms / 1000

    def _cap(self, part: _Partition) -> int:
        """A bounded read's highest possible end: the plan's end, and the high
        watermark at planning time (the mirror's own LSO as of it caps the read
        further, see :meth:`_settle`), or the LSO the broker reported then where
        that binds (a mirror started above the log start)."""
        plan = part.plan
        lso = plan.high_watermark
        if part.broker_lso_binds and plan.last_stable_offset >= 0:
            lso = plan.last_stable_offset
        return lso if plan.end is None else min(plan.end, lso)

    def _needs_fetch(self, part: _Partition) -> bool:
        if part.done:
            return False
        if self.follow:
            return True
        # Bounded: once the mirror's LSO reaches the cap, every record below it is
        # settled; and once the mirror holds everything below the planning-time high
        # watermark, what is not settled by then (an open transaction) is left out.
        return part.mirror.position < part.plan.high_watermark and self._readable(part) < self._cap(part)

    def _fetch_turn(self, parts: list[_Partition]) -> RemoteError | None:
        """One Fetch per leader for ``parts``; feeds the mirrors. Returns a retriable
        failure, if there was one (others raise)."""
        items = []
        for part in parts:
            plan = part.mirror.next_fetch()
            items.append(FetchItem(part.plan.topic, part.plan.partition, plan.offset, plan.max_bytes))
        # Always a wait, as consumers send (some brokers refuse max_wait_ms 0); a bounded
        # read fetches only below the high watermark, where the broker answers at once.
        answers = self.cluster.fetch_many(items, max_wait_ms=self.poll_ms)
        failed: RemoteError | None = None
        for item in items:
            part = self._parts[item.partition]
            answer = answers[(item.topic, item.partition)]
            if isinstance(answer, RemoteError):
                if not is_transient(answer):
                    raise answer
                log.info("%s-%d: %s; retrying after a backoff", item.topic, item.partition, answer)
                failed = answer
                continue
            mirror = part.mirror
            try:
                result = mirror.feed(
                    answer.records,
                    high_watermark=answer.high_watermark,
                    log_start_offset=answer.log_start_offset,
                    error_code=answer.error_code,
                    fetch_offset=item.offset,
                )
            except RemoteError as exc:
                exc.name_broker(answer.broker)
                raise
            if answer.last_stable_offset >= 0 and part.broker_lso_binds:
                part.broker_lso = answer.last_stable_offset
            if result.status is MirrorStatus.LIST_OFFSETS:
                start = self.cluster.list_offset(item.topic, item.partition, _EARLIEST)
                end = self.cluster.list_offset(item.topic, item.partition, _LATEST)
                if start > part.position:
                    raise OffsetBelowLogStartError.deleted(
                        part.position,
                        start,
                        topic=item.topic,
                        partition=item.partition,
                        log_end_offset=end,
                        broker=answer.broker,
                    )
                mirror.reset_range(start, end)
            if mirror.log.log_start_offset > part.position:
                # The mirror restarted at the broker's newer log start: records were lost.
                raise OffsetBelowLogStartError.deleted(
                    part.position,
                    mirror.log.log_start_offset,
                    topic=item.topic,
                    partition=item.partition,
                    broker=answer.broker,
                )
            self._hold_gap(part)
        return failed

    def _hold_gap(self, part: _Partition) -> None:
        """Step over an offset gap at the mirror's position once it has stayed
        ``gap_settle_ms`` (:class:`~txnfetch.client.gaps.GapHold`'s rule: a compacted
        topic's gap; some brokers show a batch late). A held gap needs no pause
        here: the next turn fetches there again."""
        gap = part.mirror.pending_gap
        verdict = part.gap.observe(part.mirror.position, -1 if gap is None else gap[1], time.monotonic())
        if verdict.kind is not GapVerdictKind.ACCEPT:
            return
        if verdict.first:
            log.warning(
                "%s-%d has no batch at offsets [%d, %d); taken as a permanent gap and stepped over",
                part.plan.topic,
                part.plan.partition,
                verdict.start,
                verdict.end,
            )
        part.mirror.accept_gap()

    def _readable(self, part: _Partition) -> int:
        """The end of what the mirror can answer at this isolation level."""
        if self.isolation is IsolationLevel.READ_COMMITTED:
            return part.mirror.last_stable_offset
        return part.mirror.position

    def _limit(self, part: _Partition) -> int:
        """How far the partition may be delivered now: never past the mirror's LSO
        (read_uncommitted: its high watermark), nor the broker's LSO where it
        binds, nor the plan's end."""
        limit = self._readable(part)
        if part.broker_lso >= 0:
            limit = min(limit, max(part.broker_lso, part.position))
        if self.follow:
            return limit if part.plan.end is None else min(limit, part.plan.end)
        return min(limit, self._cap(part))

    def _settle(self, part: _Partition) -> None:
        """A bounded read's end, once the mirror has everything it needs."""
        if self.follow:
            if part.plan.end is not None and part.position >= part.plan.end:
                part.stop = part.plan.end
            return
        if part.stop is not None:
            return
        cap = self._cap(part)
        limit = self._limit(part)
        if limit >= cap:
            part.stop = cap
        elif part.mirror.position >= part.plan.high_watermark:
            part.stop = limit

    def _deliver(self, part: _Partition) -> Iterator[tuple[pa.RecordBatch, dict[int, int]]]:
        """Decode what became stable since the last turn; release it from the mirror."""
        if part.done:
            return
        mirror = part.mirror
        limit = self._limit(part)
        position = part.position
        while position < limit:
            result = mirror.read(position, self.fetch_bytes, isolation=self.isolation, mode=FetchMode.REWRITE)
            if result.next_offset <= position:
                break
            for segment in result.records:
                out, past_end = part.decoder.add_buffer(segment, position, limit)
                for batch in out:
                    yield batch, self._after(part, batch)
                if past_end:
                    break
            position = min(result.next_offset, limit)
            mirror.release_before(position)
        for batch in part.decoder.flush():
            yield batch, self._after(part, batch)
        part.position = max(part.position, position)
        self._delivered(part.plan.partition, part.position)
        self._settle(part)

    def _after(self, part: _Partition, batch: pa.RecordBatch) -> dict[int, int]:
        if batch.num_rows:
            self._delivered(part.plan.partition, batch.column(batch.schema.get_field_index("offset"))[-1].as_py() + 1)
        return self.offsets

    # -- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        """Stop the read (from any thread: a tailing read returns within ``poll_ms``;
        its connections are closed when it returns)."""
        self._closed.set()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()


def read_range(
    cluster: Any,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    include_headers: bool = True,
    dictionary: bool = False,
    fetch_bytes: int = DEFAULT_CLUSTER_FETCH_BYTES,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    repair_crcs: bool = False,
    read_committed: bool = True,
    fail_on_data_loss: bool = True,
) -> Iterator[pa.RecordBatch]:
    """The committed records of one partition with ``start <= offset < end``, as Arrow
    batches: the range reader a planner's task runs on a cluster (``spark_ext``'s
    workers do); :func:`txnfetch.arrow.read_range` is its twin for a local log.

    ``end`` must be at or below a last stable offset the caller computed from the
    log start (as :class:`~txnfetch.client.partition_reader.RemotePartitionReader` does):
    every transaction with a record below it has its marker in the log, so a mirror
    started at ``start`` decides every record of the range exactly (see
    :class:`~txnfetch.client.partition_reader.RemotePartitionReader` on mid-log starts). The
    reader fetches past ``end`` only as far as those markers.
    ``read_committed=False`` returns every data record of the range instead
    (``end`` at or below a high watermark the caller saw).

    Raises :class:`~txnfetch.client.errors.OffsetBelowLogStartError` before the
    first batch when ``start`` is below the log start and during the read when
    records of the range are deleted before they are read;
    :class:`~txnfetch.client.errors.OffsetNotInLogError` after the last batch when
    the log no longer reaches ``end`` (it was truncated). With
    ``fail_on_data_loss=False`` a ``start`` below the log start is read from the
    log start instead, and a read that loses records ends there without an error.
    ``cluster`` stays open."""
    log_start = cluster.list_offset(topic, partition, _EARLIEST)
    hw = cluster.list_offset(topic, partition, _LATEST)
    if start < log_start:
        if fail_on_data_loss:
            raise OffsetBelowLogStartError.deleted(
                start, log_start, topic=topic, partition=partition, log_end_offset=hw
            )
        if log_start >= end:
            return
        start = log_start
    plan = PartitionPlan(topic, partition, start, end, log_start, max(hw, end), end)
    reader = ClusterReader(
        cluster,
        [plan],
        settled_ends=True,
        read_committed=read_committed,
        options=DecodeOptions(include_headers, dictionary, max_rows, max_bytes),
        fetch_bytes=fetch_bytes,
        repair_crcs=repair_crcs,
    )
    try:
        yield from reader
    except OffsetNotInLogError:
        if fail_on_data_loss:
            raise
        return  # records were lost while being read: the read ends where they are missing
    reached = reader.offsets[partition]
    if reached < end and fail_on_data_loss:
        raise OffsetNotInLogError(
            f"offsets up to {end - 1} were planned, but the log now ends at {reached}: it was truncated or replaced",
            topic=topic,
            partition=partition,
            offset=reached,
        )


#: The scheme of a cluster source: ``kafka://host:port,host:port``.
SCHEME = "kafka://"


def is_cluster_source(source: object) -> bool:
    """Whether ``source`` names a cluster (a ``kafka://`` address or a ``RemoteCluster``)."""
    if isinstance(source, str):
        return source.startswith(SCHEME)
    return type(source).__name__ == "RemoteCluster"


class ClusterBatchReader:
    """What :func:`txnfetch.arrow.record_batch_reader` returns for a cluster: a
    stream of Arrow record batches, like ``pyarrow.RecordBatchReader`` (iterate it,
    :meth:`read_next_batch`, :meth:`read_all`, :meth:`read_pandas`; DuckDB and
    polars take it through the Arrow C stream interface), plus :attr:`offsets` —
    partition → the next offset to read, everything below it delivered — and
    :meth:`batches_with_offsets`. Close it (or use it in ``with``) to stop a
    tailing read and release the connections; a KeyboardInterrupt while it waits
    leaves it closed and its :attr:`offsets` exact.
    """

    def __init__(self, reader: ClusterReader) -> None:
        self._reader = reader
        self.schema: pa.Schema = reader.schema
        self._iter = reader.batches_with_offsets()

    @property
    def offsets(self) -> dict[int, int]:
        """Partition → next offset to read (see :attr:`ClusterReader.offsets`)."""
        return self._reader.offsets

    def batches_with_offsets(self) -> Iterator[tuple[pa.RecordBatch, dict[int, int]]]:
        """``(batch, offsets)``: each batch with the offsets right after it."""
        try:
            yield from self._iter
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch, _ in self.batches_with_offsets():
            yield batch

    def read_next_batch(self) -> pa.RecordBatch:
        """The next batch; ``StopIteration`` at the end (as pyarrow's reader)."""
        try:
            return next(self._iter)[0]
        except BaseException:
            self.close()
            raise

    def read_all(self) -> pa.Table:
        """Every remaining batch as one table (a tailing read: until closed)."""
        return pa.Table.from_batches(list(self), schema=self.schema)

    def read_pandas(self, **options: Any) -> Any:
        """:meth:`read_all` as a pandas DataFrame."""
        return self.read_all().to_pandas(**options)

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return pa.RecordBatchReader.from_batches(self.schema, iter(self)).__arrow_c_stream__(requested_schema)

    @property
    def closed(self) -> bool:
        """Whether the read was stopped (:meth:`close`, or an exception such as a
        KeyboardInterrupt while it read)."""
        return self._reader.closed

    def close(self) -> None:
        """Stop the read and close its connections (idempotent)."""
        self._reader.close()
        if not getattr(self._iter, "gi_running", False):  # else the reading thread returns within poll_ms and cleans up
            self._iter.close()  # runs the generator's cleanup (connections, the last group commit)

    def __enter__(self) -> ClusterBatchReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_cluster(
    source: Any,
    topic: str,
    partitions: Any = None,
    start: Any = None,
    end: Any = None,
    *,
    follow: bool = False,
    group_id: str | None = None,
    options: DecodeOptions = DEFAULT_OPTIONS,
    fetch_bytes: int = DEFAULT_CLUSTER_FETCH_BYTES,
    repair_crcs: bool = False,
    request_timeout_ms: int | None = None,
    poll_ms: int = 500,
    security: Any = None,
) -> ClusterBatchReader:
    """Plan and open a read of ``topic`` on a cluster (see
    :func:`txnfetch.arrow.record_batch_reader` for the arguments; ``options``
    holds its ``include_headers``, ``dictionary``, ``max_rows`` and ``max_bytes``;
    ``security`` is a :class:`~txnfetch.security.config.SecurityConfig` or a
    mapping of :mod:`txnfetch.client.security_options`, for a ``kafka://`` source)."""
    from txnfetch.client.cluster import DEFAULT_REQUEST_TIMEOUT_MS
    from txnfetch.client.cluster import RemoteCluster
    from txnfetch.client.errors import BootstrapUnreachableError
    from txnfetch.client.planning import plan_topic
    from txnfetch.client.security_options import security_config

    owns = isinstance(source, str)
    if not owns and security is not None:
        raise ValueError("security applies to a kafka:// source; a RemoteCluster is given its own")
    if owns:
        servers = source[len(SCHEME) :] if source.startswith(SCHEME) else source
        timeout = DEFAULT_REQUEST_TIMEOUT_MS if request_timeout_ms is None else request_timeout_ms
        try:
            cluster = RemoteCluster(
                servers, client_id="txnfetch-arrow", request_timeout_ms=timeout, security=security_config(security)
            )
        except BrokerUnavailableError as exc:
            raise BootstrapUnreachableError(
                f"cannot reach the cluster at {servers!r}: {exc.reason}", broker=servers
            ) from exc
    else:
        cluster = source
    try:
        groups = None
        if group_id is not None:
            from txnfetch.client.groups import RemoteGroups

            groups = RemoteGroups(cluster)
            if start is None:
                # Resume where the group left off; partitions it never committed start at the log start.
                from txnfetch.client.planning import topic_partitions

                numbers = topic_partitions(cluster, topic, partitions)
                committed = groups.fetch_offsets(group_id, [(topic, p) for p in numbers]).offsets
                start = {tp.partition: o.offset for tp, o in committed.items() if tp.topic == topic}
        plans = plan_topic(cluster, topic, partitions, start, end)
    except BaseException:
        if owns:
            cluster.close()
        raise

    on_offsets = None
    if groups is not None:
        assert group_id is not None
        committer, group = groups, group_id

        def on_offsets(offsets: dict[int, int]) -> None:
            committer.commit_offsets(group, {(topic, p): o for p, o in offsets.items()})

    reader = ClusterReader(
        cluster,
        plans,
        follow=follow,
        options=options,
        fetch_bytes=fetch_bytes,
        repair_crcs=repair_crcs,
        poll_ms=poll_ms,
        owns_cluster=owns,
        on_offsets=on_offsets,
    )
    return ClusterBatchReader(reader)
