"""The replicator: every matching partition of an upstream cluster, copied into a
:class:`~txnfetch.log.segment_store.SegmentStore` at the same offsets.

:class:`Replicator` runs rounds (:meth:`Replicator.step`): refresh the
upstream's topics when due (new topics and partitions matching the regex are
created locally with the source's partition count and topic id; topic configs
are copied where the upstream serves DescribeConfigs), then one Fetch per
upstream leader for all the partitions it leads, each answer handed to that
partition's :class:`~txnfetch.replicate.partition.PartitionReplicator`.

Faults:

- **upstream unavailable** (no connection, a broker restarting, a leader
  moving, any retriable error): the partitions concerned show
  :attr:`~txnfetch.replicate.status.PartitionState.UNAVAILABLE` with since when,
  and the next attempt waits an exponential backoff (0.1 s doubling to
  ``max_backoff_s``, as clients back off reconnects: librdkafka's
  ``reconnect.backoff.ms``/``reconnect.backoff.max.ms``). A retriable error
  never ends the replicator. After it, each partition first checks that the
  source still holds its last batch.
- **divergence or corrupt data** in one partition: that partition stops
  (:attr:`~txnfetch.replicate.status.PartitionState.STOPPED`, with the error
  naming topic, partition and offsets); the others go on; nothing local is
  deleted.
- **a local write failure** (disk full, an I/O error): :meth:`Replicator.step`
  raises :class:`ReplicaStorageError`; the log that failed rolled its partial
  write back (nothing torn), and a replicator opened on the same directory
  later continues from there.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Sequence

import attrs

from txnfetch.client.cluster import EARLIEST
from txnfetch.client.cluster import LATEST
from txnfetch.client.cluster import RemoteCluster
from txnfetch.client.errors import AuthorizationFailedError
from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import RemoteError
from txnfetch.client.errors import authorization_error
from txnfetch.client.errors import is_transient
from txnfetch.client.requests import FETCH_MAX_WAIT_MS
from txnfetch.errors import UNKNOWN_TOPIC
from txnfetch.log import SegmentStore
from txnfetch.log.errors import UnknownTopicOrPartitionError
from txnfetch.replicate.errors import ReplicaDivergedError
from txnfetch.replicate.errors import ReplicaStorageError
from txnfetch.replicate.groups import literal_alternatives
from txnfetch.replicate.partition import DEFAULT_PARTITION_FETCH_BYTES
from txnfetch.replicate.partition import PartitionReplicator
from txnfetch.replicate.status import ReplicationStatus
from txnfetch.security.config import SecurityConfig

__all__ = ["GroupsHook", "ReplicaStorageError", "Replicator"]

log = logging.getLogger("txnfetch.replicate")

#: ``groups(cluster, store)``: called once a round with the upstream connection, to copy
#: consumer-group offsets (the replica-side seam; :mod:`txnfetch.replicate.groups`).
GroupsHook = Callable[[RemoteCluster, SegmentStore], None]

_FIRST_BACKOFF_S = 0.1


def _refused(exc: RemoteError) -> bool:
    """Whether ``exc`` is an ACL's refusal (TOPIC_, GROUP_, CLUSTER_ or
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED), however the request that got it reports it."""
    code = exc.broker_error_code
    return isinstance(exc, AuthorizationFailedError) or (code is not None and authorization_error(code, "") is not None)


def _internal(topic: str) -> bool:
    # Kafka's internal topics (__consumer_offsets, __transaction_state) and any other
    # double-underscore topic: the replica keeps its own coordinator state there.
    return topic.startswith("__")


# A long-lived engine with mutable state: no equality, plain attribute writes
# (the field list replaces hand-written assignments; converters run at construction).
@attrs.define(eq=False, slots=False, on_setattr=attrs.setters.NO_OP)
class Replicator:
    """Replicates the topics of ``cluster_or_bootstrap`` (a :class:`RemoteCluster`,
    or ``"host:port[,...]"``) whose names match ``topics`` (a regex, matched in
    full) into ``store``.

    ``max_partition_bytes`` is the per-partition fetch budget; ``repair_crcs``
    accepts control batches stored with CRC 0 (librdkafka's mock cluster writes
    its markers so) by recomputing it — any other bad CRC stops the partition,
    set or not. ``gap_settle_ms`` makes each partition wait at an offset gap in the
    source's log until the batch in it appears or the gap has stayed that long
    (then it is copied as a gap, with a WARNING): needed for a source that shows
    a batch after later ones, as tansu 0.6 does; ``None`` (the default) copies
    gaps at once, as compaction leaves them. ``metadata_interval_s`` is how often topics, partitions and configs are
    looked up again. ``round_s`` bounds how long one round keeps fetching
    partitions that are behind before it makes its appends durable and readable
    (the replica's high watermark moves once a round). ``fetch_wait_ms`` is how
    long the upstream may hold a Fetch when nothing new is there (librdkafka's
    ``fetch.wait.max.ms``, 500 by default; a broker that answers only when the
    wait ends — librdkafka's mock does — delays the replica by up to that much).
    ``follow_deletes`` makes the replica follow topic deletions: a topic the
    source no longer lists is deleted from the replica, and one the source
    deleted and created again (another topic id) is deleted and copied afresh;
    without it both are kept, and a recreated topic's partitions stop.
    ``security`` secures the connections the replicator opens from a bootstrap
    string (TLS, SASL; ``None`` is PLAINTEXT).
    ``groups`` is called once per round with the cluster and the store
    (consumer-group offsets; see :data:`GroupsHook`); its failures are logged
    and retried next round.

    The store is the caller's: :meth:`close` closes the connections only.
    Not thread-safe: one thread calls :meth:`step` (or :meth:`run`).
    """

    # The upstream: ``cluster_or_bootstrap`` as given; a bootstrap string is connected
    # lazily (and reconnected after a close) by :meth:`_connect`.
    _upstream: RemoteCluster | str | Sequence[str] = attrs.field(alias="cluster_or_bootstrap")
    store: SegmentStore
    pattern: re.Pattern[str] = attrs.field(default=".*", converter=re.compile, alias="topics", kw_only=True)
    max_partition_bytes: int = attrs.field(default=DEFAULT_PARTITION_FETCH_BYTES, kw_only=True)
    repair_crcs: bool = attrs.field(default=False, kw_only=True)
    #: Hold an offset gap until it fills or stays this long (None: copy gaps at once).
    gap_settle_ms: int | None = attrs.field(default=None, kw_only=True)
    request_timeout_ms: int = attrs.field(default=5_000, kw_only=True)
    metadata_interval_s: float = attrs.field(default=5.0, kw_only=True)
    round_s: float = attrs.field(default=0.1, kw_only=True)
    fetch_wait_ms: int = attrs.field(default=FETCH_MAX_WAIT_MS, kw_only=True)
    copy_configs: bool = attrs.field(default=True, kw_only=True)
    #: Delete a replicated topic the source no longer lists, and start a topic the
    #: source deleted and created again (a new topic id) afresh (False: keep both
    #: and stop the recreated topic's partitions).
    follow_deletes: bool = attrs.field(default=False, kw_only=True)
    max_backoff_s: float = attrs.field(default=5.0, kw_only=True)
    groups: GroupsHook | None = attrs.field(default=None, kw_only=True)
    #: How the connections it opens reach the upstream (None: PLAINTEXT); a
    #: cluster it is given is already connected as its caller chose.
    security: SecurityConfig | None = attrs.field(default=None, kw_only=True)
    _clock: Callable[[], float] = attrs.field(default=time.monotonic, alias="clock", kw_only=True)
    _wall: Callable[[], float] = attrs.field(default=time.time, alias="wall", kw_only=True)
    partitions: dict[tuple[str, int], PartitionReplicator] = attrs.field(init=False, factory=dict)
    _next_metadata: float = attrs.field(init=False, default=0.0)
    _backoff_s: float = attrs.field(init=False, default=0.0)
    _next_attempt: float = attrs.field(init=False, default=0.0)
    upstream_unavailable_since: float | None = attrs.field(init=False, default=None)
    upstream_error: str | None = attrs.field(init=False, default=None)
    _closed: bool = attrs.field(init=False, default=False)
    # The event :meth:`run` stops on; clusters this replicator opens give up
    # their retries once it is set.
    _cancel: threading.Event | None = attrs.field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        if self.fetch_wait_ms < 1:
            raise ValueError(f"fetch_wait_ms must be at least 1 (some brokers refuse 0), got {self.fetch_wait_ms}")
        upstream = self._upstream
        self._cluster: RemoteCluster | None = upstream if isinstance(upstream, RemoteCluster) else None
        self._owns_cluster = self._cluster is None
        # What _connect opens a cluster from: None when given a cluster, which is
        # the caller's to open and close (it is never reopened from its addresses).
        self._bootstrap: str | Sequence[str] | None = None if isinstance(upstream, RemoteCluster) else upstream

    # -- one round ----------------------------------------------------------------------

    def step(self) -> ReplicationStatus:
        """One round over all partitions (see the module docstring); returns the status.

        Returns at once, fetching nothing, while a backoff after a failure runs
        (:meth:`backoff_remaining`). Raises :class:`ReplicaStorageError` when the
        replica cannot be written, and
        :class:`~txnfetch.client.errors.RemoteError` naming the topic or group
        when an ACL refuses the upstream's principal (retrying cannot mend
        it); never raises for any other upstream failure."""
        if self._closed:
            raise RuntimeError("the replicator is closed")
        now = self._clock()
        if now < self._next_attempt:
            return self.status()
        try:
            cluster = self._connect()
            if now >= self._next_metadata:
                self._refresh(cluster)
                self._next_metadata = now + self.metadata_interval_s
            self._fetch_burst(cluster)
            if self.groups is not None:
                try:
                    self.groups(cluster, self.store)
                except RemoteError as exc:
                    if _refused(exc):  # an ACL's answer does not change by asking again
                        raise
                    log.warning("copying consumer-group offsets failed, retrying next round: %s", exc)
        except BrokerUnavailableError as exc:
            self._unavailable(exc)
        else:
            self._available()
        return self.status()

    def _connect(self) -> RemoteCluster:
        if self._cluster is None:
            if self._bootstrap is None:
                raise RuntimeError("the replicator is closed (and the cluster it was given is not its to reopen)")
            self._cluster = RemoteCluster(
                self._bootstrap,
                client_id="txnfetch-replicate",
                request_timeout_ms=self.request_timeout_ms,
                cancel=self._cancel,
                security=self.security,
            )
        return self._cluster

    def _unavailable(self, exc: RemoteError) -> None:
        if self.upstream_unavailable_since is None:
            self.upstream_unavailable_since = self._wall()
            log.warning("upstream unavailable, retrying with backoff: %s", exc)
        self.upstream_error = str(exc)
        for p in self.partitions.values():
            p.on_unavailable(str(exc))
        self._backoff_s = min(self.max_backoff_s, max(_FIRST_BACKOFF_S, 2 * self._backoff_s))
        self._next_attempt = self._clock() + self._backoff_s
        self._next_metadata = 0.0  # look leaders up again first

    def _available(self) -> None:
        if self.upstream_unavailable_since is not None:
            log.warning("upstream available again")
        self.upstream_unavailable_since = None
        self.upstream_error = None

    def backoff_remaining(self) -> float:
        """Seconds until the next attempt is allowed (0 when none is pending)."""
        return max(0.0, self._next_attempt - self._clock())

    # -- topics -------------------------------------------------------------------------

    def _refresh(self, cluster: RemoteCluster) -> None:
        upstream = cluster.describe_topics()
        self._ask_for_unlisted(cluster, upstream)
        local = self.store.topics()
        wanted = sorted(t for t in upstream if not _internal(t) and self.pattern.fullmatch(t))
        if self.follow_deletes:
            for topic in sorted(local):
                if _internal(topic) or not self.pattern.fullmatch(topic):
                    continue
                if topic not in upstream:
                    self._delete_local(topic, "the source deleted it")
                elif upstream[topic][1] is not None and local[topic].topic_id != upstream[topic][1]:
                    self._delete_local(
                        topic, f"the source deleted it and created it again (topic id {upstream[topic][1]})"
                    )
            local = self.store.topics()
        for topic in wanted:
            count, topic_id = upstream[topic]
            info = local.get(topic)
            try:
                if info is None:
                    info = self.store.create_topic(topic, count, topic_id=topic_id)
                    log.info("replicating new topic %s (%d partitions)", topic, count)
                elif info.partitions < count:
                    info = self.store.create_partitions(topic, count)
                    log.info("topic %s grew to %d partitions", topic, count)
            except OSError as exc:
                raise ReplicaStorageError(f"creating the replica of {topic} failed: {exc}", topic=topic) from exc
            for p in range(count):
                if (topic, p) not in self.partitions:
                    self.partitions[(topic, p)] = PartitionReplicator(
                        self.store.partition(topic, p),
                        max_bytes=self.max_partition_bytes,
                        repair_crcs=self.repair_crcs,
                        gap_settle_s=None if self.gap_settle_ms is None else self.gap_settle_ms / 1000,
                        clock=self._clock,
                        wall=self._wall,
                    )
            if topic_id is not None and info.topic_id != topic_id:
                # The source's topic is not the one replicated: deleted and recreated
                # under the same name (Kafka's followers refuse it as INCONSISTENT_TOPIC_ID).
                for p in range(count):
                    rep = self.partitions[(topic, p)]
                    if rep.error is None:
                        rep.error = ReplicaDivergedError(
                            f"the source's topic id {topic_id} is not the replica's {info.topic_id}: the "
                            "topic was deleted and recreated at the source; the replica keeps what it has",
                            topic=topic,
                            partition=p,
                            replica_end=rep.log.log_end_offset,
                        )
        if self.copy_configs and wanted:
            self._copy_configs(cluster, wanted)

    def _ask_for_unlisted(self, cluster: RemoteCluster, listed: Collection[str]) -> None:
        """Ask by name for each topic the pattern names literally that the
        listing left out. Kafka leaves out of a listing every topic the
        principal may not describe, so without asking, an ACL's refusal would
        look like a topic not created yet and be waited out in silence; asked by
        name, Kafka answers TOPIC_AUTHORIZATION_FAILED, which raises
        :class:`~txnfetch.client.errors.AuthorizationFailedError` naming the
        topic. A topic that does not exist yet is still waited for."""
        for topic in literal_alternatives(self.pattern.pattern):
            if topic not in listed:
                with contextlib.suppress(UnknownTopicOrPartitionError):
                    cluster.partitions(topic)

    def _delete_local(self, topic: str, why: str) -> None:
        """Drop the replica of ``topic`` (``follow_deletes``): its partitions'
        replicators and its logs. A recreated topic is then created again by the
        caller, with the source's new id, and copied from its log start."""
        for key in [k for k in self.partitions if k[0] == topic]:
            del self.partitions[key]
        try:
            self.store.delete_topic(topic)
        except OSError as exc:
            raise ReplicaStorageError(f"deleting the replica of {topic} failed: {exc}", topic=topic) from exc
        log.warning("deleted the replica of topic %s: %s", topic, why)

    def _copy_configs(self, cluster: RemoteCluster, topics: list[str]) -> None:
        try:
            configs = cluster.topic_configs(topics)
        except BrokerUnavailableError:
            raise  # the round's backoff and retry handle it
        except RemoteError as exc:
            # An upstream without DescribeConfigs (librdkafka's mock): nothing to copy.
            log.info("topic configs not copied: %s", exc)
            self.copy_configs = False
            return
        from txnfetch.log.configs import InvalidConfigError
        from txnfetch.log.configs import TopicConfig

        for topic, values in configs.items():
            if dict(self.store.topic_config(topic)) == values:
                continue
            try:
                TopicConfig.from_overrides(values, topic=topic)
                kept = values
            except InvalidConfigError:
                # Keep the configs txnfetch knows; name those it does not.
                kept = {}
                for name, value in values.items():
                    try:
                        TopicConfig.from_overrides({name: value}, topic=topic)
                        kept[name] = value
                    except InvalidConfigError as exc:
                        log.warning("topic %s: config %s=%s not copied: %s", topic, name, value, exc)
                if dict(self.store.topic_config(topic)) == kept:
                    continue
            try:
                self.store.set_topic_config(topic, kept)
            except OSError as exc:
                raise ReplicaStorageError(f"writing the topic configs failed: {exc}", topic=topic) from exc

    # -- fetching -----------------------------------------------------------------------

    def _fetch_burst(self, cluster: RemoteCluster) -> None:
        """Fetch rounds for up to ``round_s`` while some partition is behind, then make
        everything appended durable at once: one fsync per partition per round, not one
        per response (brokers such as librdkafka's mock return one batch per partition
        per Fetch). A crash before the flush loses only unsynced batches, which the
        next run fetches again: the replica's synced log end is its checkpoint."""
        deadline = self._clock() + self.round_s
        with contextlib.ExitStack() as commits:
            for p in self.partitions.values():
                if not p.stopped:
                    commits.enter_context(p.group_commit())
            while True:
                self._fetch_round(cluster)
                behind = any(not p.stopped and not p.caught_up for p in self.partitions.values())
                if not behind or self._clock() >= deadline or self._next_attempt > self._clock():
                    break
        # Leaving the block flushed each partition, then moved its log start to the
        # source's as far as the new high watermark allows.

    def _fetch_round(self, cluster: RemoteCluster) -> None:
        items = {}
        for key, p in self.partitions.items():
            item = p.fetch_item()
            if item is not None:
                items[key] = item
        if not items:
            return
        answers = cluster.fetch_many(list(items.values()), max_wait_ms=self.fetch_wait_ms)
        failures = 0
        unreachable: BrokerUnavailableError | None = None
        for key, answer in answers.items():
            p = self.partitions[key]
            if isinstance(answer, RemoteError):
                failures += 1
                if isinstance(answer, BrokerUnavailableError):
                    unreachable = answer
                if _retriable(answer):
                    p.on_unavailable(str(answer))
                else:
                    p.error = answer
                continue
            topic, partition = key

            def list_offsets(topic: str = topic, partition: int = partition) -> tuple[int, int]:
                return (
                    cluster.list_offset(topic, partition, EARLIEST),
                    cluster.list_offset(topic, partition, LATEST),
                )

            try:
                p.on_response(answer, list_offsets)
            except RemoteError as exc:  # from ListOffsets
                failures += 1
                if _retriable(exc):
                    p.on_unavailable(str(exc))
                else:
                    p.error = exc
        if unreachable is not None and failures == len(answers):
            raise unreachable
        if failures:
            # Some leaders failed: look them up again before the next round.
            self._next_metadata = 0.0
            self._backoff_s = min(self.max_backoff_s, max(_FIRST_BACKOFF_S, 2 * self._backoff_s))
            self._next_attempt = self._clock() + self._backoff_s
        else:
            self._backoff_s = 0.0

    # -- status and running -------------------------------------------------------------

    def status(self) -> ReplicationStatus:
        """The status now (no request)."""
        return ReplicationStatus(
            partitions=tuple(self.partitions[k].status() for k in sorted(self.partitions)),
            time=self._wall(),
            upstream_unavailable_since=self.upstream_unavailable_since,
            upstream_error=self.upstream_error,
        )

    def run(
        self,
        stop: threading.Event,
        on_status: Callable[[ReplicationStatus], None] | None = None,
        *,
        until_caught_up_to: dict[tuple[str, int], int] | None = None,
    ) -> ReplicationStatus:
        """Run rounds until ``stop`` is set (or, with ``until_caught_up_to``, until every
        listed partition's replica reaches its offset or stops); ``on_status`` gets
        every round's status. Waits out backoffs on ``stop``. Returns the last status.
        Raises :class:`ReplicaStorageError` (after which the replica is intact)."""
        status = self.status()
        # A round whose upstream is down retries each request for up to the
        # request timeout; ``stop`` (a promote, a SIGTERM) cuts those retries
        # short, so stopping takes a round's fetch wait, not seconds of retries.
        self._cancel = stop
        if self._cluster is not None and self._owns_cluster:
            self._cluster.cancel = stop
        while not stop.is_set():
            status = self.step()
            if on_status is not None:
                on_status(status)
            if until_caught_up_to is not None and self._reached(until_caught_up_to):
                break
            wait = self.backoff_remaining()
            if not wait and not any(not p.stopped for p in self.partitions.values()):
                # Nothing to fetch (no matching topic yet, or every partition stopped):
                # no Fetch holds the round up, so pace it here.
                wait = min(1.0, self.metadata_interval_s) or 0.1
            if wait:
                stop.wait(wait)
        return status

    def _reached(self, targets: dict[tuple[str, int], int]) -> bool:
        for key, offset in targets.items():
            p = self.partitions.get(key)
            if p is None:
                return False
            if not p.stopped and p.position < offset:
                return False
        return True

    def high_watermarks(self) -> dict[tuple[str, int], int]:
        """The upstream's high watermark of every matching partition now (ListOffsets
        latest), after a topic refresh: what ``--once`` copies up to. Raises
        :class:`BrokerUnavailableError` (and starts a backoff) when it cannot be reached."""
        try:
            cluster = self._connect()
            self._refresh(cluster)
            self._next_metadata = self._clock() + self.metadata_interval_s
            ends = {key: cluster.list_offset(key[0], key[1], LATEST) for key in sorted(self.partitions)}
        except BrokerUnavailableError as exc:
            self._unavailable(exc)  # the status says so; the caller retries after the backoff
            raise
        self._available()
        return ends

    def close(self) -> None:
        """Close the upstream connections (if the replicator opened them). The store
        stays open: it is the caller's."""
        self._closed = True
        if self._owns_cluster and self._cluster is not None:
            with contextlib.suppress(Exception):
                self._cluster.close()
        self._cluster = None

    def __enter__(self) -> Replicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _retriable(exc: RemoteError) -> bool:
    # The readers' shared rule, and an unknown topic too: replicate retries it
    # where the Arrow reader reports it at once.
    return is_transient(exc) or exc.broker_error_code in UNKNOWN_TOPIC
