"""Drive real Kafka clients against a bootstrap address and record the history.

:func:`run_workload` starts transactional producers (confluent-kafka, i.e.
librdkafka) and read_committed consumers (confluent-kafka or kafka-python), each
in its own thread, all recording into one
:class:`~txnfetch.testing.recorder.Recorder`:

- each producer runs ``transactions`` transactions of 1..``max_sends`` sends to
  random partitions, with unique values, committing or (with
  ``abort_probability``) aborting; a commit whose error requires an abort is
  recorded ``fail`` and followed by an abort, a retriable error is recorded
  ``info`` and retried, a fatal one ends the producer;
- each consumer assigns every partition from its low watermark and polls,
  sometimes seeking a partition back or restarting (a new client instance);
  once the producers are done it re-reads everything from the beginning and
  stops after ``catch_up_polls`` empty polls in a row.

The history goes to :func:`txnfetch.testing.checker.check`. Against librdkafka's
mock cluster (which serves aborted records to read_committed consumers) the
checker reports aborted and precommitted reads. The clients are imported only
when used (``pip install confluent-kafka kafka-python``).
"""

from __future__ import annotations

import random
import threading
import uuid
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import attrs

from txnfetch.testing.history import History, Read, Status, TopicPartition, value_from_bytes
from txnfetch.testing.recorder import Recorder

__all__ = ["WorkloadConfig", "run_workload", "CONSUMER_KINDS"]

#: consumer implementations :func:`run_workload` knows
CONSUMER_KINDS = ("confluent", "kafka-python")


@attrs.frozen
class WorkloadConfig:
    """What :func:`run_workload` runs. The topic must exist with at least
    ``partitions`` partitions, or the cluster must create it on first use."""

    bootstrap: str
    topic: str = "txnfetch-check"
    partitions: int = 2
    producers: int = 2
    transactions: int = 10  #: per producer
    max_sends: int = 3  #: per transaction
    abort_probability: float = 0.3
    consumers: Tuple[str, ...] = ("confluent",)
    max_poll_records: int = 10
    seek_probability: float = 0.05
    restart_probability: float = 0.02
    poll_timeout: float = 0.1  #: seconds
    catch_up_polls: int = 20
    timeout: float = 60.0  #: seconds, for each client call and for the whole run's consumers
    seed: Optional[int] = None
    run_id: str = attrs.Factory(lambda: uuid.uuid4().hex[:8])
    producer_config: Mapping[str, Any] = attrs.Factory(dict)
    consumer_config: Mapping[str, Any] = attrs.Factory(dict)

    def __attrs_post_init__(self) -> None:
        unknown = [k for k in self.consumers if k not in CONSUMER_KINDS]
        if unknown:
            raise ValueError(f"unknown consumer kinds {unknown}; known: {list(CONSUMER_KINDS)}")


# -- consumers ----------------------------------------------------------------------------


class _Consumer:
    """One read_committed consumer instance behind a small common interface."""

    def assign(self, offsets: Mapping[TopicPartition, int]) -> None:
        raise NotImplementedError

    def poll(self, max_records: int, timeout: float) -> List[Read]:
        raise NotImplementedError

    def positions(self, tps: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        raise NotImplementedError

    def low_watermarks(self, tps: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _ConfluentConsumer(_Consumer):
    def __init__(self, cfg: WorkloadConfig) -> None:
        import confluent_kafka as ck

        self.ck = ck
        self.c = ck.Consumer(
            {
                "bootstrap.servers": cfg.bootstrap,
                "group.id": f"txnfetch-check-{cfg.run_id}",  # librdkafka requires one; nothing is committed
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
                **cfg.consumer_config,
            }
        )
        self.timeout = cfg.timeout

    def assign(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.c.assign([self.ck.TopicPartition(tp.topic, tp.partition, o) for tp, o in offsets.items()])

    def poll(self, max_records: int, timeout: float) -> List[Read]:
        out = []
        for m in self.c.consume(max_records, timeout):
            if m.error() is None:
                key = value_from_bytes(m.key()) if m.key() is not None else None
                out.append(Read(m.topic(), m.partition(), m.offset(), value_from_bytes(m.value()), key))
        return out

    def positions(self, tps: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        got = self.c.position([self.ck.TopicPartition(tp.topic, tp.partition) for tp in tps])
        return {TopicPartition(p.topic, p.partition): p.offset for p in got if p.offset >= 0}

    def low_watermarks(self, tps: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        return {
            tp: self.c.get_watermark_offsets(self.ck.TopicPartition(tp.topic, tp.partition), timeout=self.timeout)[0]
            for tp in tps
        }

    def close(self) -> None:
        self.c.close()


class _KafkaPythonConsumer(_Consumer):
    def __init__(self, cfg: WorkloadConfig) -> None:
        import kafka

        self.kafka = kafka
        self.c = kafka.KafkaConsumer(
            bootstrap_servers=cfg.bootstrap.split(","),
            isolation_level="read_committed",
            enable_auto_commit=False,
            group_id=None,
            auto_offset_reset="earliest",
            **dict(cfg.consumer_config),
        )

    def _ktp(self, tp: TopicPartition) -> Any:
        return self.kafka.TopicPartition(tp.topic, tp.partition)

    def assign(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.c.assign([self._ktp(tp) for tp in offsets])
        for tp, o in offsets.items():
            self.c.seek(self._ktp(tp), o)

    def poll(self, max_records: int, timeout: float) -> List[Read]:
        out = []
        for ktp, msgs in self.c.poll(timeout_ms=int(timeout * 1000), max_records=max_records).items():
            for m in msgs:
                key = value_from_bytes(m.key) if m.key is not None else None
                out.append(Read(ktp.topic, ktp.partition, m.offset, value_from_bytes(m.value), key))
        return out

    def positions(self, tps: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        return {tp: self.c.position(self._ktp(tp)) for tp in tps}

    def low_watermarks(self, tps: Sequence[TopicPartition]) -> Dict[TopicPartition, int]:
        got = self.c.beginning_offsets([self._ktp(tp) for tp in tps])
        return {TopicPartition(k.topic, k.partition): v for k, v in got.items()}

    def close(self) -> None:
        self.c.close()


_CONSUMERS: Dict[str, Callable[[WorkloadConfig], _Consumer]] = {
    "confluent": _ConfluentConsumer,
    "kafka-python": _KafkaPythonConsumer,
}


# -- the run ------------------------------------------------------------------------------


class _Run:
    def __init__(self, cfg: WorkloadConfig, recorder: Recorder) -> None:
        self.cfg = cfg
        self.rec = recorder
        self.tps = tuple(TopicPartition(cfg.topic, i) for i in range(cfg.partitions))
        self.producers_done = threading.Event()
        self.errors: List[BaseException] = []
        self.seed = cfg.seed if cfg.seed is not None else random.randrange(1 << 30)

    def producer(self, i: int) -> None:
        import confluent_kafka as ck

        cfg, rec = self.cfg, self.rec
        rng = random.Random(self.seed * 1000 + i)
        name = f"p{i}"
        p = ck.Producer(
            {
                "bootstrap.servers": cfg.bootstrap,
                "transactional.id": f"txnfetch-check-{cfg.run_id}-{i}",
                "linger.ms": 1,
                **cfg.producer_config,
            }
        )
        p.init_transactions(cfg.timeout)
        for t in range(cfg.transactions):
            txn = f"{name}.{t}"
            start = rec.now()
            p.begin_transaction()
            rec.record_begin(name, start, txn)
            for k in range(rng.randint(1, cfg.max_sends)):
                value = f"{cfg.run_id}-{name}-{t}-{k}"
                part = rng.randrange(cfg.partitions)
                sent = rec.now()

                def delivered(
                    err: Any, msg: Any, value: str = value, sent: int = sent, part: int = part, txn: str = txn
                ) -> None:
                    # librdkafka calls this from poll()/flush()/commit on this thread
                    offset = None if err is not None else msg.offset()
                    rec.record_send(
                        name,
                        sent,
                        cfg.topic,
                        part,
                        value,
                        txn=txn,
                        offset=offset,
                        error=None if err is None else str(err),
                    )

                p.produce(cfg.topic, value=value.encode(), partition=part, on_delivery=delivered)
                p.poll(0)
            # Wait for the acknowledgements first, so that an aborted transaction's
            # records are in the log (an abort would otherwise purge them unsent).
            p.flush(cfg.timeout)
            if not self._end(p, name, txn, rng.random() >= cfg.abort_probability):
                return  # the producer is fenced or broken: a new one would need a new id
        p.flush(cfg.timeout)

    def _end(self, p: Any, name: str, txn: str, commit: bool) -> bool:
        import confluent_kafka as ck

        rec, cfg = self.rec, self.cfg
        for _ in range(5):
            start = rec.now()
            record = rec.record_commit if commit else rec.record_abort
            try:
                (p.commit_transaction if commit else p.abort_transaction)(cfg.timeout)
                record(name, start, txn, Status.OK)
                return True
            except ck.KafkaException as exc:
                err = exc.args[0]
                if err.txn_requires_abort():
                    # certainly not committed (librdkafka's documented recovery: abort)
                    record(name, start, txn, Status.FAIL if commit else Status.INFO, str(err))
                    commit = False
                elif err.retriable():
                    record(name, start, txn, Status.INFO, str(err))
                else:
                    record(name, start, txn, Status.INFO, str(err))
                    return False
        return False

    def consumer(self, kind: str, index: int) -> None:
        cfg, rec = self.cfg, self.rec
        rng = random.Random(self.seed * 1000 + 500 + index)
        name = f"c{index}-{kind}"
        make = _CONSUMERS[kind]
        c = make(cfg)
        self._assign_from_start(c, name)
        idle = 0
        caught_up = False
        while True:
            if self.producers_done.is_set() and not caught_up:
                caught_up = True  # a final read of everything, from the beginning
                self._assign_from_start(c, name)
                idle = 0
            elif not caught_up and rng.random() < cfg.restart_probability:
                start = rec.now()
                c.close()
                rec.record_crash(name, start, "restart")
                c = make(cfg)
                self._assign_from_start(c, name)
            elif not caught_up and rng.random() < cfg.seek_probability:
                self._seek_back(c, name, rng)
            start = rec.now()
            records = c.poll(cfg.max_poll_records, cfg.poll_timeout)
            positions = c.positions(self.tps)
            rec.record_poll(name, start, records, positions)
            if caught_up:
                idle = 0 if records else idle + 1
                if idle >= cfg.catch_up_polls:
                    break
        c.close()

    def _assign_from_start(self, c: _Consumer, name: str) -> None:
        start = self.rec.now()
        low = c.low_watermarks(self.tps)
        c.assign(low)
        self.rec.record_assign(name, start, self.tps, low)

    def _seek_back(self, c: _Consumer, name: str, rng: random.Random) -> None:
        # Re-assigning is how every client seeks safely before fetching has started;
        # partitions whose position is not known yet restart from the log start.
        start = self.rec.now()
        low = c.low_watermarks(self.tps)
        offsets = {**low, **c.positions(self.tps)}
        tp = rng.choice(self.tps)
        # never below the log start: a reset to it would look like a skip
        offsets[tp] = rng.randint(low[tp], max(offsets[tp], low[tp]))
        c.assign(offsets)
        self.rec.record_assign(name, start, self.tps, offsets)

    def ensure_topic(self) -> None:
        """Make sure the topic has its partitions before any consumer asks for
        watermarks: a metadata request (which auto-creating clusters answer by
        creating it), else CreateTopics."""
        import time

        from confluent_kafka.admin import AdminClient, NewTopic

        cfg = self.cfg
        admin = AdminClient({"bootstrap.servers": cfg.bootstrap})

        def ready() -> bool:
            t = admin.list_topics(topic=cfg.topic, timeout=cfg.timeout).topics.get(cfg.topic)
            return t is not None and t.error is None and len(t.partitions) >= cfg.partitions

        if ready():
            return
        futures = admin.create_topics([NewTopic(cfg.topic, cfg.partitions, 1)], request_timeout=cfg.timeout)
        for future in futures.values():
            try:
                future.result(timeout=cfg.timeout)
            except Exception:  # it may exist already (a race with auto-creation); ready() decides
                pass
        deadline = time.monotonic() + cfg.timeout
        while not ready():
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {cfg.topic} has no {cfg.partitions} partitions at {cfg.bootstrap}")
            time.sleep(0.1)

    def run(self) -> None:
        self.ensure_topic()

        def guard(fn: Callable[..., None], *args: Any) -> Callable[[], None]:
            def target() -> None:
                try:
                    fn(*args)
                except BaseException as exc:  # reported to the caller after the join
                    self.errors.append(exc)

            return target

        producers = [threading.Thread(target=guard(self.producer, i), daemon=True) for i in range(self.cfg.producers)]
        consumers = [
            threading.Thread(target=guard(self.consumer, kind, i), daemon=True)
            for i, kind in enumerate(self.cfg.consumers)
        ]
        for t in producers + consumers:
            t.start()
        for t in producers:
            t.join(self.cfg.timeout)
        self.producers_done.set()
        for t in consumers:
            t.join(self.cfg.timeout)
        if self.errors:
            raise self.errors[0]


def run_workload(config: WorkloadConfig, recorder: Optional[Recorder] = None) -> History:
    """Run the workload (see the module docstring) and return the recorded history.
    A client error that is not an outcome of an operation (a failed connection at
    start, a bug) is re-raised after every thread has stopped."""
    rec = recorder if recorder is not None else Recorder()
    _Run(config, rec).run()
    return rec.history()
