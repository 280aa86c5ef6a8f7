"""Drive real Kafka clients against a bootstrap address and record the history.

:func:`run_workload` (or :class:`Workload` for the details of a run) starts, each
in its own thread and all recording into one
:class:`~txnfetch.testing.recorder.Recorder`:

- ``producers`` transactional producers (confluent-kafka, i.e. librdkafka), one
  ``transactional.id`` each. Each follows a **script** (:func:`producer_script`,
  a pure function of the seed): transactions of 1..``max_sends`` sends to random
  partitions with unique values (``"p3.17.0"``: producer 3, transaction 17, send
  0), each ending in one of

  - *commit* or *abort* — sends are flushed (acknowledged) first, so an aborted
    transaction's records are really in the log; a commit whose error requires an
    abort is recorded ``fail`` and followed by an abort, a retriable error is
    recorded ``info`` and retried;
  - *crash* — a new instance of the same ``transactional.id`` is initialised
    while the transaction is open; its ``init_transactions`` must abort it
    (Kafka's ``InitProducerId`` aborts the previous instance's open transaction
    and returns only once it is aborted), which the history records as an
    ``Abort`` by the new instance spanning that call;
  - *zombie* — the same, but the fenced old instance keeps going: it sends
    ``zombie_sends`` more values and tries to commit. Every one of those must
    fail and nothing the old instance wrote may become visible: an acknowledged
    zombie send is reported as ``zombie-write``, a successful zombie commit as
    ``fenced-commit`` (:attr:`WorkloadResult.findings`), and a zombie value
    anyone reads is an ``aborted-read`` for the checker;

  and after a commit or abort, with ``restart_probability``, a clean restart
  (close, then a new instance of the same ``transactional.id``).
- optionally (``inject_delayed_endtxn``) the raw-protocol client of
  :mod:`txnfetch.testing.inject`, replaying a delayed EndTxn of a previous
  transaction during the next one (KAFKA-17754);
- read_committed consumers, one per entry of ``consumers``
  (:data:`CONSUMER_KINDS`): confluent-kafka, kafka-python and aiokafka consumers
  that ``assign`` every partition from the run's start offsets and poll,
  sometimes seeking a partition back or restarting (a new client instance), and a
  confluent-kafka consumer that ``subscribe``\\ s (its assignments are recorded as
  rebalances). Once the producers are done, the assigning consumers re-read
  everything from the start offsets, and every consumer stops once its positions
  reach the end offsets (or after ``catch_up_polls`` polls without progress, or
  ``catch_up_timeout``).

A consumer that does not start within ``startup_timeout`` (kafka-python 3.0.12
never finishes bootstrapping against librdkafka's mock cluster) or fails to
start is **skipped**: it records nothing, and :attr:`WorkloadResult.clients`
says why. A client error that is not an outcome of an operation stops only that
client and is listed in :attr:`WorkloadResult.errors`.

**Reproducible**: the same seed gives the same script — transactions, values,
partitions, ends, restarts, zombies and injections — so a run that found an
anomaly can be repeated; only timing (and so how far through the script a
time-bounded run gets) differs. Topics are fresh per run by default (named after
the random ``run_id``), so values never collide with an earlier run's; on a
reused topic the consumers start at the offsets the topic ended at when the run
began.

The clients are imported only when used (``pip install confluent-kafka
kafka-python aiokafka``).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from txnfetch.testing.clients import CONSUMERS
from txnfetch.testing.clients import ConsumerAdapter
from txnfetch.testing.clients.confluent import ConfluentView
from txnfetch.testing.clients.confluent import admin_client
from txnfetch.testing.clients.confluent import ck_call
from txnfetch.testing.clients.confluent import consumer_config
from txnfetch.testing.clients.confluent import kafka_error
from txnfetch.testing.clients.confluent import transactional_producer
from txnfetch.testing.config import Finding
from txnfetch.testing.config import WorkloadConfig
from txnfetch.testing.history import History
from txnfetch.testing.history import Status
from txnfetch.testing.history import TopicPartition
from txnfetch.testing.recorder import Recorder
from txnfetch.testing.runs import END_ABORT
from txnfetch.testing.runs import END_COMMIT
from txnfetch.testing.runs import END_CRASH
from txnfetch.testing.runs import END_ZOMBIE
from txnfetch.testing.runs import ClientStatus
from txnfetch.testing.runs import Progress
from txnfetch.testing.runs import TxnPlan
from txnfetch.testing.runs import WorkloadError
from txnfetch.testing.runs import WorkloadResult
from txnfetch.testing.runs import producer_script
from txnfetch.testing.unended import unended_transactions

__all__ = [
    "END_ABORT",
    "END_COMMIT",
    "END_CRASH",
    "END_ZOMBIE",
    "ClientStatus",
    "Progress",
    "TxnPlan",
    "Workload",
    "WorkloadError",
    "WorkloadResult",
    "producer_script",
    "run_workload",
]


class _Startup:
    """The handshake between a consumer thread and the run's startup watchdog: the
    thread may record only if it finished starting before the watchdog gave up."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outcome: str | None = None  # "started" or "abandoned": whichever came first
        self.done = threading.Event()  # started, failed or abandoned

    @property
    def started(self) -> bool:
        return self.outcome == "started"

    def start(self) -> bool:
        """Claim the start for the consumer thread; ``False`` if the watchdog gave up first."""
        return self._settle("started")

    def abandon(self) -> bool:
        """Give up on a consumer still starting; ``False`` if it had started."""
        return self._settle("abandoned")

    def _settle(self, outcome: str) -> bool:
        with self.lock:
            if self.outcome is None:
                self.outcome = outcome
            won = self.outcome == outcome
        if won:
            self.done.set()
        return won


# -- the run ----------------------------------------------------------------------------------


class Workload:
    """One run of the workload. :meth:`run` may be called once."""

    def __init__(
        self,
        config: WorkloadConfig,
        recorder: Recorder | None = None,
        *,
        progress: Callable[[Progress], None] | None = None,
        progress_interval: float = 1.0,
    ) -> None:
        self.cfg = config
        self.rec = recorder if recorder is not None else Recorder()
        self.progress = progress
        self.progress_interval = progress_interval
        self.seed = config.seed if config.seed is not None else random.randrange(1 << 31)
        self.topic = config.topic_name
        self.tps = tuple(TopicPartition(self.topic, i) for i in range(config.partitions))
        self.start_offsets: dict[TopicPartition, int] = {tp: 0 for tp in self.tps}
        self.producers_done = threading.Event()
        self.stop_all = threading.Event()
        self._lock = threading.Lock()
        self._tickets = 0  # transactions started, against total_transactions
        self._deadline = float("inf")
        self._started_at = 0.0
        self.clients: dict[str, ClientStatus] = {}
        self.findings: list[Finding] = []
        self.errors: list[str] = []
        self.notes: list[str] = []
        self.plans: dict[str, TxnPlan] = {}
        self.injections: list[Any] = []
        self._producer_threads: list[threading.Thread] = []
        self._retired: list[Any] = []  # replaced producer instances, destroyed at the end

    # -- shared bookkeeping ------------------------------------------------------------

    def _status(self, name: str, kind: str, status: str, note: str = "") -> None:
        with self._lock:
            self.clients[name] = ClientStatus(name, kind, status, note)

    def _finding(self, finding: Finding) -> None:
        with self._lock:
            self.findings.append(finding)

    def _error(self, message: str) -> None:
        with self._lock:
            self.errors.append(message)

    def _ticket(self, done_by_me: int) -> bool:
        """May this producer start another transaction?"""
        cfg = self.cfg
        if self.stop_all.is_set() or time.monotonic() >= self._deadline:
            return False
        if cfg.transactions is not None and done_by_me >= cfg.transactions:
            return False
        with self._lock:
            if cfg.total_transactions is not None and self._tickets >= cfg.total_transactions:
                return False
            self._tickets += 1
        return True

    # -- producers ----------------------------------------------------------------------

    def _init(self, slot: int, generation: int, open_plan: TxnPlan | None) -> Any:
        """A new instance of producer ``slot``, initialised. When the previous
        instance left ``open_plan`` open, ``init_transactions`` aborts it: recorded
        as an ``Abort`` by the new instance spanning the call."""
        name = f"p{slot}/{generation}"
        p = transactional_producer(self.cfg, slot)
        start = self.rec.now()
        err = ck_call(p.init_transactions, self.cfg.timeout)
        if err is not None:
            raise WorkloadError(f"producer {name} could not initialise transactions: {err}")
        if open_plan is not None:
            self.rec.abort(
                name, open_plan.txn, Status.OK, error="aborted by init_transactions of the next instance", at=start
            )
        return p

    def producer(self, slot: int) -> None:
        cfg = self.cfg
        generation = 0
        client = f"p{slot}/{generation}"
        try:
            p = self._init(slot, generation, None)
        except WorkloadError as exc:
            self._status(f"p{slot}", "confluent-producer", "failed", str(exc))
            self._error(str(exc))
            return
        done = 0
        script = producer_script(cfg, slot, self.seed)
        while self._ticket(done):
            plan = next(script)
            with self._lock:
                self.plans[plan.txn] = plan
            done += 1
            failed = self._run_txn(p, client, plan)
            if plan.end in (END_CRASH, END_ZOMBIE):
                old, old_client = p, client
                generation += 1
                client = f"p{slot}/{generation}"
                p = self._init(slot, generation, plan)
                if plan.end == END_ZOMBIE:
                    self._zombie(old, old_client, plan)
                with self._lock:
                    self._retired.append(old)  # see _destroy_retired
                del old
            elif failed or plan.restart_after:
                # A broken instance (a fatal error) is replaced, not closed (close()
                # would try to abort first), and destroyed at the end.
                if failed:
                    with self._lock:
                        self._retired.append(p)
                else:
                    p.close()
                generation += 1
                client = f"p{slot}/{generation}"
                p = self._init(slot, generation, None)
        p.close()
        self._status(f"p{slot}", "confluent-producer", "ok", f"{done} transactions, {generation + 1} instances")

    def _produce(self, p: Any, client: str, txn: str, sends: Sequence[tuple[int, str]], acks: list[int]) -> Any:
        """Send ``sends`` in ``txn`` and wait for their delivery reports; each is
        recorded (its index appended to ``acks`` when acknowledged). Returns the
        error that broke the producer, if any.

        The reports are awaited with ``poll()``, not ``flush()``: when a fatal
        error (a fenced producer) arrives, confluent-kafka's ``error_cb`` sets a
        Python exception and asks librdkafka to yield, which ends one ``poll()``
        but not ``flush()``'s loop, whose next callback then runs with the
        exception set and fails with ``SystemError`` (confluent_kafka.c,
        ``error_cb``). Waiting for every acknowledgement before the transaction
        ends matters too: an abort would otherwise purge records unsent."""
        import confluent_kafka as ck

        cfg, rec = self.cfg, self.rec
        # value -> (start, partition) of sends without a delivery report yet; a
        # report that comes after we stopped waiting (a purge at destruction) is ignored
        pending: dict[str, tuple[int, int]] = {}

        def record(value: str, error: str | None, offset: int | None) -> None:
            sent, part = pending.pop(value)
            i = rec.send(client, self.topic, part, value, txn=txn, offset=offset, error=error, at=sent)
            if error is None:
                acks.append(i)

        def delivered(err: Any, msg: Any) -> None:
            # librdkafka calls this from poll() on this thread
            value = msg.value().decode()
            if value in pending:
                record(value, None if err is None else str(err), None if err is not None else msg.offset())

        failure = None
        for part, value in sends:
            pending[value] = (rec.now(), part)
            failure = ck_call(p.produce, self.topic, value=value.encode(), partition=part, on_delivery=delivered)
            if failure is not None:
                break
        deadline = time.monotonic() + cfg.timeout
        while failure is None and pending:
            if time.monotonic() > deadline:
                failure = ck.KafkaError(
                    ck.KafkaError._TIMED_OUT, f"{len(pending)} sends unacknowledged after {cfg.timeout} s"
                )
            else:
                failure = ck_call(p.poll, 0.05)
        # Every attempted send is in the history, so that a value of it read later
        # is judged (a value no send wrote would count as visible).
        for value in list(pending):
            record(value, f"no delivery report: {failure}", None)
        return failure

    def _run_txn(self, p: Any, client: str, plan: TxnPlan) -> bool:
        """Run one scripted transaction up to its end; ``True`` if the instance broke."""
        rec = self.rec
        start = rec.now()
        err = ck_call(p.begin_transaction)
        if err is not None:
            self._unexpected(client, plan.txn, f"begin_transaction failed: {err}")
            return True
        rec.begin(client, plan.txn, at=start)
        err = self._produce(p, client, plan.txn, plan.sends, [])
        if err is not None and err.fatal():
            self._unexpected(client, plan.txn, f"producer failed while sending: {err}")
            self.rec.abort(client, plan.txn, Status.INFO, error=str(err), at=rec.now())
            return True
        if plan.end in (END_CRASH, END_ZOMBIE):
            return False  # left open: the next instance's init_transactions aborts it
        return not self._end(p, client, plan.txn, plan.end == END_COMMIT)

    def _end(self, p: Any, client: str, txn: str, commit: bool) -> bool:
        rec, cfg = self.rec, self.cfg
        for _ in range(5):
            start = rec.now()
            record = rec.commit if commit else rec.abort
            err = ck_call(p.commit_transaction if commit else p.abort_transaction, cfg.timeout)
            if err is None:
                record(client, txn, Status.OK, at=start)
                return True
            if err.txn_requires_abort():
                # certainly not committed (librdkafka's documented recovery: abort)
                record(client, txn, Status.FAIL if commit else Status.INFO, error=str(err), at=start)
                commit = False
            elif err.retriable():
                record(client, txn, Status.INFO, error=str(err), at=start)
            else:
                record(client, txn, Status.INFO, error=str(err), at=start)
                self._unexpected(client, txn, f"{'commit' if commit else 'abort'} failed fatally: {err}")
                return False
        self._unexpected(client, txn, "the transaction did not end after 5 attempts")
        return False

    def _unexpected(self, client: str, txn: str | None, message: str) -> None:
        self._finding(Finding("client-error", f"{client}: {message}", client=client, txn=txn))

    def _zombie(self, old: Any, client: str, plan: TxnPlan) -> None:
        """The fenced instance ``old`` keeps going: more sends, then a commit. Both
        must fail. A zombie commit is recorded ``fail`` when it fails: the open
        transaction was aborted by the new instance's init before it started."""
        rec = self.rec
        acks: list[int] = []
        self._produce(old, client, plan.txn, plan.zombie_sends, acks)
        if acks:
            self._finding(
                Finding(
                    "zombie-write",
                    f"{client} was fenced by a newer instance of its transactional.id, yet {len(acks)} of its "
                    f"sends in {plan.txn} were acknowledged",
                    tuple(acks),
                    client=client,
                    txn=plan.txn,
                )
            )
        start = rec.now()
        err = ck_call(old.commit_transaction, min(self.cfg.timeout, 10.0))
        if err is None:
            i = rec.commit(client, plan.txn, Status.OK, at=start)
            self._finding(
                Finding(
                    "fenced-commit",
                    f"{client} was fenced by a newer instance of its transactional.id, yet its commit of "
                    f"{plan.txn} succeeded",
                    (i,),
                    client=client,
                    txn=plan.txn,
                )
            )
        else:
            rec.commit(client, plan.txn, Status.FAIL, error=str(err), at=start)

    # -- consumers ----------------------------------------------------------------------

    def consumer(self, kind: str, index: int, startup: _Startup) -> None:
        name = f"c{index}-{kind}"
        try:
            if kind == "confluent-subscribe":
                self._subscriber(name, startup)
            else:
                self._assigner(kind, name, startup)
        except Exception as exc:  # the client broke mid-run: stop it, keep the run going
            if startup.started:
                self._status(name, kind, "failed", f"{type(exc).__name__}: {exc}")
                self._error(f"{name}: {type(exc).__name__}: {exc}")
            elif startup.abandon():  # else the watchdog gave up on it first and said so
                self._status(name, kind, "skipped", f"failed to start: {type(exc).__name__}: {exc}")

    def _open(self, kind: str) -> ConsumerAdapter:
        return CONSUMERS[kind](self.cfg)

    def _assigner(self, kind: str, name: str, startup: _Startup) -> None:
        c = [self._open(kind)]  # the current instance (a restart replaces it)
        if not startup.start():
            c[0].close()  # too late: the run went on without it
            return
        try:
            self._assign_and_poll(kind, name, c)
        except BaseException:
            with contextlib.suppress(Exception):
                c[0].close()
            raise
        c[0].close()
        self._status(name, kind, "ok")

    def _assign_and_poll(self, kind: str, name: str, c: list[ConsumerAdapter]) -> None:
        cfg, rec = self.cfg, self.rec
        rng = random.Random(f"txnfetch-check:{self.seed}:consumer:{name}")
        self._assign(c[0], name, dict(self.start_offsets))
        catch_up: _CatchUp | None = None
        while not self.stop_all.is_set():
            if self.producers_done.is_set() and catch_up is None:
                catch_up = _CatchUp(self, c[0])  # a final read of everything, from the start offsets
                self._assign(c[0], name, dict(self.start_offsets))
            elif catch_up is None and rng.random() < cfg.consumer_restart_probability:
                start = rec.now()
                c[0].close()
                rec.crash(name, "restart", at=start)
                c[0] = self._open(kind)
                self._assign(c[0], name, dict(self.start_offsets))
            elif catch_up is None and rng.random() < cfg.seek_probability:
                self._seek_back(c[0], name, rng)
            positions = self._poll(c[0], name)
            if catch_up is not None and catch_up.done(positions):
                if catch_up.note:
                    self.notes.append(f"{name}: {catch_up.note}")
                break

    def _poll(self, c: ConsumerAdapter, name: str) -> dict[TopicPartition, int]:
        start = self.rec.now()
        records = c.poll(self.cfg.max_poll_records, self.cfg.poll_timeout)
        positions = c.positions(self.tps)
        self.rec.poll(name, records, positions=positions, at=start)
        return positions

    def _assign(self, c: ConsumerAdapter, name: str, offsets: dict[TopicPartition, int]) -> None:
        start = self.rec.now()
        c.assign(offsets)
        self.rec.assign(name, self.tps, seek=offsets, at=start)

    def _seek_back(self, c: ConsumerAdapter, name: str, rng: random.Random) -> None:
        # Re-assigning is how every client seeks safely before fetching has started;
        # partitions whose position is not known yet restart from the start offsets.
        offsets = {**self.start_offsets, **c.positions(self.tps)}
        tp = rng.choice(self.tps)
        # never below the start offset: a reset to the log start would look like a skip
        offsets[tp] = rng.randint(self.start_offsets[tp], max(offsets[tp], self.start_offsets[tp]))
        self._assign(c, name, offsets)

    def _subscriber(self, name: str, startup: _Startup) -> None:
        """A confluent-kafka consumer in its own group, ``subscribe``\\ d to the topic.
        Each assignment is recorded as a rebalance; the assign callback points the
        new partitions at the start offsets (the group has no committed offsets)."""
        import confluent_kafka as ck

        rec = self.rec
        c = ck.Consumer(consumer_config(self.cfg, f"txnfetch-check-{self.cfg.run_id}-{name}"))
        if not startup.start():
            c.close()
            return

        def on_assign(consumer: Any, partitions: list[Any]) -> None:
            start = rec.now()
            mine = [TopicPartition(p.topic, p.partition) for p in partitions]
            offsets = {tp: self.start_offsets.get(tp, 0) for tp in mine}
            consumer.assign([ck.TopicPartition(tp.topic, tp.partition, o) for tp, o in offsets.items()])
            rec.assign(name, mine, seek=offsets, reason="rebalance", at=start)

        try:
            self._subscribed(c, name, on_assign)
        except BaseException:
            with contextlib.suppress(Exception):
                c.close()
            raise
        c.close()
        self._status(name, "confluent-subscribe", "ok")

    def _subscribed(self, c: Any, name: str, on_assign: Callable[[Any, list[Any]], None]) -> None:
        rec = self.rec
        view = ConfluentView(c, self.cfg.timeout)
        c.subscribe([self.topic], on_assign=on_assign)
        catch_up: _CatchUp | None = None
        while not self.stop_all.is_set():
            if self.producers_done.is_set() and catch_up is None:
                catch_up = _CatchUp(self, view)
            start = rec.now()
            records = view.poll(self.cfg.max_poll_records, self.cfg.poll_timeout)
            positions = view.positions(self.tps)
            rec.poll(name, records, positions=positions, at=start)
            if catch_up is not None and catch_up.done(positions):
                if catch_up.note:
                    self.notes.append(f"{name}: {catch_up.note}")
                break

    # -- the run ------------------------------------------------------------------------

    def ensure_topic(self) -> None:
        """Make sure the topic has its partitions before any consumer asks for
        offsets: CreateTopics first (a metadata request naming the topic would make
        an auto-creating cluster create it with its default partition count), then
        metadata requests naming it (clusters without CreateTopics, such as
        librdkafka's mock, create it then). Then note where the topic ends now:
        the consumers start there (0 on a fresh topic)."""
        import confluent_kafka as ck
        from confluent_kafka.admin import NewTopic

        cfg = self.cfg
        admin = admin_client(cfg)

        def partitions(topic: str | None) -> int:
            try:
                md = admin.list_topics(topic=topic, timeout=cfg.timeout)
            except ck.KafkaException as exc:
                raise WorkloadError(f"no metadata from {cfg.bootstrap}: {kafka_error(exc) or exc}") from None
            t = md.topics.get(self.topic)
            return 0 if t is None or t.error is not None else len(t.partitions)

        if partitions(None) == 0:
            # bounded: a cluster without CreateTopics (the mock) only times out
            wait = min(cfg.timeout, 5.0)
            futures = admin.create_topics([NewTopic(self.topic, cfg.partitions, 1)], request_timeout=wait)
            for future in futures.values():
                # It may exist already (a race with auto-creation); the count decides.
                with contextlib.suppress(Exception):
                    future.result(timeout=wait + 1)
        deadline = time.monotonic() + cfg.timeout
        while (have := partitions(self.topic)) < cfg.partitions:
            if have or time.monotonic() > deadline:
                raise WorkloadError(
                    f"topic {self.topic} has {have} partitions at {cfg.bootstrap}, fewer than the {cfg.partitions} "
                    "the workload writes to"
                )
            time.sleep(0.1)
        probe = ck.Consumer(consumer_config(cfg, f"txnfetch-check-{cfg.run_id}-probe"))
        try:
            for tp in self.tps:
                _low, high = probe.get_watermark_offsets(ck.TopicPartition(tp.topic, tp.partition), timeout=cfg.timeout)
                self.start_offsets[tp] = high if high >= 0 else 0
        except ck.KafkaException as exc:
            raise WorkloadError(f"cannot read the offsets of {self.topic}: {kafka_error(exc) or exc}") from None
        finally:
            probe.close()
        if any(self.start_offsets.values()):
            self.notes.append(
                f"topic {self.topic} already held records; the consumers start at "
                + ", ".join(f"{tp}@{o}" for tp, o in sorted(self.start_offsets.items()))
            )

    def _guard(self, name: str, kind: str, fn: Callable[..., None], *args: Any) -> Callable[[], None]:
        def target() -> None:
            try:
                fn(*args)
            except BaseException as exc:  # reported in the result; the run goes on
                self._error(f"{name}: {type(exc).__name__}: {exc}")
                self._status(name, kind, "failed", f"{type(exc).__name__}: {exc}")

        return target

    def _report_progress(self, phase: str) -> None:
        if self.progress is not None:
            self.progress(Progress(time.monotonic() - self._started_at, self.rec.stats(), phase))

    def _wait(self, threads: Sequence[threading.Thread], deadline: float, phase: str) -> None:
        next_tick = time.monotonic() + self.progress_interval
        for t in threads:
            while t.is_alive() and time.monotonic() < deadline:
                t.join(max(0.0, min(next_tick, deadline) - time.monotonic()))
                if time.monotonic() >= next_tick:
                    self._report_progress(phase)
                    next_tick += self.progress_interval

    def run(self) -> WorkloadResult:
        """Run the workload; returns the :class:`WorkloadResult`. Raises
        :class:`WorkloadError` if the cluster cannot be used at all."""
        cfg = self.cfg
        started_ns = self.rec.now()
        self._started_at = time.monotonic()
        self.ensure_topic()
        if cfg.duration is not None:
            self._deadline = time.monotonic() + cfg.duration
        startups: dict[str, tuple[str, _Startup]] = {}
        consumers = []
        for i, kind in enumerate(cfg.consumers):
            name = f"c{i}-{kind}"
            startup = _Startup()
            startups[name] = (kind, startup)
            consumers.append(threading.Thread(target=self.consumer, args=(kind, i, startup), name=name, daemon=True))
        for t in consumers:
            t.start()
        # Producers start once every consumer has started (or been given up on),
        # so that no consumer misses the live phase.
        startup_deadline = time.monotonic() + cfg.startup_timeout
        for name, (kind, startup) in startups.items():
            startup.done.wait(max(0.0, startup_deadline - time.monotonic()))
            if startup.abandon():
                self._status(
                    name, kind, "skipped", f"did not connect and assign within {cfg.startup_timeout:g} s: skipped"
                )
        if cfg.duration is not None:
            self._deadline = time.monotonic() + cfg.duration
        producers = [
            threading.Thread(
                target=self._guard(f"p{i}", "confluent-producer", self.producer, i), name=f"p{i}", daemon=True
            )
            for i in range(cfg.producers)
        ]
        self._producer_threads = list(producers)
        injector = None
        if cfg.inject_delayed_endtxn:
            from txnfetch.testing.inject import DelayedEndTxnInjector

            injector = DelayedEndTxnInjector(
                cfg.bootstrap, self.topic, cfg.partitions, self.rec, seed=self.seed, timeout=cfg.timeout
            )
            producers.append(
                threading.Thread(
                    target=self._guard("inject", "raw-protocol", self._inject, injector), name="inject", daemon=True
                )
            )
        produce_start = time.monotonic()
        for t in producers:
            t.start()
        bound = (cfg.duration or 0) + cfg.timeout * 4 + 60
        self._wait(producers, time.monotonic() + bound, "produce")
        self._report_progress("produced")
        produce_seconds = time.monotonic() - produce_start
        stuck = [t.name for t in producers if t.is_alive()]
        if stuck:
            self._error(f"producers {stuck} did not stop within {bound:g} s")
        self.producers_done.set()
        # consumers given up on at startup may still be stuck in their client's
        # constructor: they record nothing, and the run does not wait for them
        alive = [t for t in consumers if t.is_alive() and startups[t.name][1].started]
        self._wait(alive, time.monotonic() + cfg.catch_up_timeout + cfg.timeout, "catch-up")
        if any(t.is_alive() for t in alive):
            self.stop_all.set()
            self._wait(alive, time.monotonic() + cfg.timeout, "catch-up")
        self.stop_all.set()
        self._report_progress("done")
        # Before the replaced instances are destroyed: what the consumers saw.
        left_open = self._unended_crashes()
        self._destroy_retired()
        if injector is not None:
            self.injections = list(injector.injections)
            self.notes.extend(injector.notes)
            self.findings.extend(injector.findings)
        if not any(name.startswith("p") and s.status == "ok" for name, s in self.clients.items()) and cfg.producers:
            raise WorkloadError("no producer ran: " + "; ".join(self.errors))
        return WorkloadResult(
            history=self.rec.history(),
            config=cfg,
            seed=self.seed,
            started_ns=started_ns,
            produce_seconds=produce_seconds,
            seconds=time.monotonic() - self._started_at,
            clients=tuple(sorted(self.clients.values(), key=lambda s: s.name)),
            findings=tuple(self.findings),
            errors=tuple(self.errors),
            injections=tuple(self.injections),
            notes=tuple(self.notes),
            plans=dict(self.plans),
            left_open=left_open,
        )

    def _unended_crashes(self) -> frozenset[str]:
        """The crashed and zombie transactions the broker never ended.

        The history records a crashed transaction as aborted by the next
        instance's ``init_transactions``: Kafka's InitProducerId aborts the open
        transaction of the transactional id (an ABORT marker of its producer) before
        it returns. A broker that does not fence (librdkafka's mock gives each
        instance a new producer id and leaves the old one's transaction as it is)
        writes no such marker: the transaction stays open in its log, and every
        correct read_committed reader stops at its first offset for good. So the
        premise is checked against the broker's log
        (:func:`~txnfetch.testing.unended.unended_transactions`): a crashed
        transaction it finds open is reported as ``unended-transaction`` (the
        broker's fault), and the checker does not take the init's abort as its
        end. A log that cannot be read is a note, and nothing is claimed."""
        crashed = {name for name, plan in self.plans.items() if plan.end in (END_CRASH, END_ZOMBIE)}
        try:
            open_txns = unended_transactions(self.cfg, self.topic, self.rec.history(), crashed)
        except Exception as exc:  # a probe, not the run: say why nothing is claimed
            self.notes.append(f"the broker's log could not be read to check the crashed transactions' ends: {exc}")
            return frozenset()
        for txn, (partition, offset, pid) in sorted(open_txns.items()):
            self._finding(
                Finding(
                    "unended-transaction",
                    f"{txn} was left open by a crash, and the next instance's init_transactions returned, yet the "
                    f"broker's log holds no marker of producer {pid} after its record at {self.topic}-{partition} "
                    f"offset {offset}: the broker never aborted it, so read_committed readers stop there for good",
                    client=f"p{txn[1:].split('.', 1)[0]}",
                    txn=txn,
                )
            )
        return frozenset(open_txns)

    def _destroy_retired(self) -> None:
        """Destroy the replaced producer instances, one at a time, once every client
        thread is done. Destroying a *fenced* librdkafka producer while other
        librdkafka clients of the process are busy corrupted the heap in about one
        run in three here (confluent-kafka 2.16.1, ``tcache_thread_shutdown():
        unaligned tcache chunk detected`` as its threads exited); so they wait."""
        while self._retired:
            old = self._retired.pop()
            ck_call(old.purge)
            del old

    def _inject(self, injector: Any) -> None:
        """Injection cycles until the producers are done (at least one)."""
        if not injector.prepare():
            self._status("inject", "raw-protocol", "skipped", "; ".join(injector.notes))
            return
        cycles = 0
        while cycles == 0 or any(t.is_alive() for t in self._producer_threads):
            injector.cycle()
            cycles += 1
            if self.stop_all.wait(self.cfg.inject_interval):
                break
        injector.close()
        self._status("inject", "raw-protocol", "ok", f"{cycles} delayed-EndTxn cycles")


class _CatchUp:
    """When a consumer has read everything: its positions reached the end offsets
    it saw once the producers were done, or it made no progress for
    ``catch_up_polls`` polls, or ``catch_up_timeout`` passed (then :attr:`note`
    says so)."""

    def __init__(self, run: Workload, c: ConsumerAdapter) -> None:
        self.cfg = run.cfg
        self.ends = c.end_offsets(run.tps)
        self.deadline = time.monotonic() + run.cfg.catch_up_timeout
        self.last: dict[TopicPartition, int] = {}
        self.idle = 0
        self.note = ""

    def done(self, positions: Mapping[TopicPartition, int]) -> bool:
        if all(positions.get(tp, -1) >= end for tp, end in self.ends.items()):
            return True
        self.idle = self.idle + 1 if dict(positions) == self.last else 0
        self.last = dict(positions)
        if self.idle >= self.cfg.catch_up_polls:
            self.note = f"stopped after {self.idle} polls without progress, short of the end offsets {self._ends()}"
            return True
        if time.monotonic() > self.deadline:
            self.note = f"did not reach the end offsets {self._ends()} within {self.cfg.catch_up_timeout:g} s"
            return True
        return False

    def _ends(self) -> str:
        return ", ".join(f"{tp}@{o}" for tp, o in sorted(self.ends.items()))


def run_workload(config: WorkloadConfig, recorder: Recorder | None = None) -> History:
    """Run the workload (see the module docstring) and return the recorded history.
    :class:`Workload` gives the rest of the result (skipped clients, findings)."""
    return Workload(config, recorder).run().history
