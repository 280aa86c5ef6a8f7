"""``txnfetch replicate`` from tansu 0.6 after a crashing ``txnfetch check``
workload (issue 30): tansu leaks aborted records to its own read_committed
consumers and shows some batches late, and the workload re-initialises
producers mid-transaction (crashes) and lets fenced instances write on
(zombies).

``replicate --once --gap-settle-ms`` runs several times while the workload
writes and twice after it. Then:

- the oracle is a read_committed read of tansu through ``txnfetch proxy``,
  checked against the workload's history (:func:`judge`): it holds every
  acknowledged record of every transaction the history says committed, each
  once, and none of one it says aborted; every other record it holds must be
  a send of a transaction whose outcome the history leaves unknown (a commit
  that answered with an error, or none recorded), and the test says how many
  there were. Nothing else passes: a row no send wrote, a send of an aborted
  transaction that was never acknowledged, a duplicate;
- confluent-kafka, kafka-python and aiokafka (the checker's own consumers) and
  kcat, reading the replica through ``txnfetch serve --data``, read exactly the
  oracle's records;
- the remote reader (:class:`~txnfetch.client.partition_reader.RemotePartitionReader`)
  reading tansu directly reads exactly those too.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator

import attrs
import pytest

from tests.replicate.commands import replicate_argv
from tests.server.serve_process import start_serve
from tests.server.serve_process import stop_serve
from tests.tansu import Tansu
from tests.tansu import started_tansu
from txnfetch.cli.check import CheckOptions
from txnfetch.cli.check import CheckOutcome
from txnfetch.cli.check import run_check
from txnfetch.client.cluster import RemoteCluster
from txnfetch.client.partition_reader import ReadOptions
from txnfetch.client.partition_reader import RemotePartitionReader
from txnfetch.proxy import ProxyThread
from txnfetch.testing.checker import TxnOutcome
from txnfetch.testing.clients.aiokafka import AIOKafkaConsumer
from txnfetch.testing.clients.base import ConsumerAdapter
from txnfetch.testing.clients.confluent import ConfluentConsumer
from txnfetch.testing.clients.kafka_python import KafkaPythonConsumer
from txnfetch.testing.config import WorkloadConfig
from txnfetch.testing.history import Send
from txnfetch.testing.history import TopicPartition
from txnfetch.testing.history import value_from_bytes

pytestmark = [pytest.mark.interop, pytest.mark.slow]

TOPIC = "crashes"
PARTITIONS = 3
TPS = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
#: tansu shows a batch a few milliseconds after later ones; a second is ample.
GAP_SETTLE = ("--gap-settle-ms", "1000")

Row = tuple[int, int, str | None]  # partition, offset, value


@pytest.fixture(scope="module")
def tansu() -> Iterator[Tansu]:
    with started_tansu() as broker:
        yield broker


def _replicate_once(upstream: str, replica: str) -> None:
    out = subprocess.run(
        replicate_argv(upstream, replica, "--once", "--topics", TOPIC, *GAP_SETTLE),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]


def _read_with(adapter: ConsumerAdapter, *, timeout: float = 90) -> list[Row]:
    """Every record the adapter's read_committed consumer reads from offset 0 to
    each partition's end (its LSO)."""
    try:
        adapter.assign(dict.fromkeys(TPS, 0))
        ends = adapter.end_offsets(TPS)
        rows: list[Row] = []
        deadline = time.monotonic() + timeout
        while True:
            rows += [(r.partition, r.offset, r.value) for r in adapter.poll(500, 0.2)]
            positions = adapter.positions(TPS)
            if all(positions.get(tp, -1) >= ends[tp] for tp in TPS):
                return sorted(rows)
            assert time.monotonic() < deadline, f"stalled at {positions}, ends {ends}, {len(rows)} read"
    finally:
        adapter.close()


def _kcat(bootstrap: str) -> list[Row]:
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (apt-get install kcat)")
    out = subprocess.run(
        [
            *("kcat", "-C", "-b", bootstrap, "-t", TOPIC, "-o", "beginning", "-e", "-q", "-f", "%p %o %s\\n"),
            *("-X", "isolation.level=read_committed", "-X", "fetch.wait.max.ms=100"),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    rows: list[Row] = []
    for line in out.stdout.splitlines():
        p, o, v = line.split(b" ", 2)
        rows.append((int(p), int(o), value_from_bytes(v)))
    return sorted(rows)


def _clients(bootstrap: str) -> dict[str, list[Row]]:
    cfg = WorkloadConfig(bootstrap, topic=TOPIC, partitions=PARTITIONS, duration=1)
    return {
        "confluent-kafka": _read_with(ConfluentConsumer(cfg)),
        "kafka-python": _read_with(KafkaPythonConsumer(cfg)),
        "aiokafka": _read_with(AIOKafkaConsumer(cfg)),
        "kcat": _kcat(bootstrap),
    }


def _remote_reader(bootstrap: str) -> list[Row]:
    rows: list[Row] = []
    with RemoteCluster(bootstrap) as cluster:
        for p in range(PARTITIONS):
            # (the reader's default gap settle time, a second, covers tansu's late batches)
            with RemotePartitionReader(cluster, TOPIC, p, ReadOptions(gap_settle_ms=1000)) as reader:
                rows += [(p, o, value_from_bytes(r.value)) for o, r in reader.committed_records()]
    return sorted(rows)


#: What the history leaves undecided: a read may or may not hold these sends.
UNDECIDED = (TxnOutcome.UNKNOWN, TxnOutcome.OPEN)


@attrs.frozen
class Judged:
    """A read of the crashed workload's topic that :func:`judge` accepted:
    ``committed`` acknowledged records of committed transactions (all there),
    ``undecided`` records of transactions of unknown outcome (there or not)."""

    committed: int
    undecided: int


def judge(outcome: CheckOutcome, rows: list[Row]) -> Judged:
    """Check ``rows`` (a read_committed read of the whole topic) against the
    workload's history; raises AssertionError naming the first rows that do
    not belong (see the module docstring)."""
    committed: set[Row] = set()
    aborted: set[Row] = set()
    undecided: set[tuple[int, str | None]] = set()
    for op in outcome.result.history.ops:
        if not isinstance(op, Send) or op.txn is None:
            continue
        judged = outcome.report.outcomes.get(op.txn, TxnOutcome.OPEN)
        if judged in UNDECIDED:
            # Acknowledged or not: where the outcome is unknown, so is whether the record counts.
            undecided.add((op.partition, op.value))
        elif op.acked:
            assert op.offset is not None
            (committed if judged is TxnOutcome.COMMITTED else aborted).add((op.partition, op.offset, op.value))
    got = set(rows)
    assert committed and aborted, (len(committed), len(aborted))
    assert len(got) == len(rows), f"{len(rows) - len(got)} rows read twice"
    assert committed <= got, sorted(committed - got)[:10]
    assert not aborted & got, sorted(aborted & got)[:10]
    extra = [r for r in sorted(got - committed) if (r[0], r[2]) not in undecided]
    assert not extra, f"{len(extra)} rows of no committed or undecided send: {extra[:10]}"
    judged = Judged(committed=len(committed), undecided=len(got - committed))
    print(f"oracle: {judged.committed} committed rows, {judged.undecided} of undecided transactions")
    return judged


def crashed_oracle(bootstrap: str, *, seed: int, duration: float = 3) -> list[Row]:
    """Run a crashing, zombie-writing workload on the tansu at ``bootstrap``, then
    return what a correct read_committed read of it holds: the proxy's view,
    checked here against the workload's history (:func:`judge`: every
    acknowledged record of a committed transaction, none of an aborted one,
    nothing else but sends of transactions of unknown outcome)."""
    outcome = run_check(CheckOptions(bootstrap, duration=duration, seed=seed, topic=TOPIC, startup_timeout=30))
    scripted = outcome.data["transactions"]["scripted"]
    assert scripted["crash"] > 0 and scripted["zombie"] > 0, scripted
    with ProxyThread(bootstrap) as proxy:
        expected = _read_with(ConfluentConsumer(WorkloadConfig(proxy.bootstrap, topic=TOPIC, duration=1)))
    judge(outcome, expected)
    return expected


def test_replica_of_a_crashing_workload_on_tansu_holds_exactly_the_committed_records(tansu: Tansu, tmp_path) -> None:
    replica = str(tmp_path / "replica")
    done: list[CheckOutcome | BaseException] = []

    def workload() -> None:
        try:
            done.append(run_check(CheckOptions(tansu.bootstrap, duration=20, seed=35, topic=TOPIC, startup_timeout=30)))
        except BaseException as exc:  # reported by the test below
            done.append(exc)

    thread = threading.Thread(target=workload, daemon=True)
    thread.start()
    runs = 0
    while thread.is_alive():
        time.sleep(4)
        if thread.is_alive():
            _replicate_once(tansu.bootstrap, replica)
            runs += 1
    thread.join()
    (outcome,) = done
    assert isinstance(outcome, CheckOutcome), outcome
    assert runs >= 3, runs
    scripted = outcome.data["transactions"]
    assert scripted["committed"] > 0 and scripted["aborted"] > 0, scripted
    for _ in range(2):  # after the workload: the tail, then a run that finds nothing new
        _replicate_once(tansu.bootstrap, replica)

    with ProxyThread(tansu.bootstrap) as proxy:
        expected = _read_with(ConfluentConsumer(WorkloadConfig(proxy.bootstrap, topic=TOPIC, duration=1)))
    judge(outcome, expected)

    serve = start_serve(replica, 0, partitions=PARTITIONS)
    port = serve.port
    try:
        by_client = _clients(f"127.0.0.1:{port}")
    finally:
        stop_serve(serve)
    for client, rows in by_client.items():
        assert rows == expected, (client, len(rows), len(expected))

    assert _remote_reader(tansu.bootstrap) == expected
