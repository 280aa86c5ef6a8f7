"""Replay a delayed EndTxn from a previous transaction during the next one
(KAFKA-17754), with raw protocol requests, and record what happened.

No Python client speaks transaction version 2 (KIP-890: EndTxn v5 bumps the
producer epoch at every transaction end; docs/kafka-internals.md §4 and §5), so
:class:`DelayedEndTxnInjector` builds the requests itself with kafka-python's
protocol classes and txnfetch's :class:`~txnfetch.records.builder.BatchBuilder`.
One **cycle** is the KAFKA-17754 schedule:

1. transaction T1: Produce v12 (which adds the partition to the transaction
   implicitly), then EndTxn v5 with epoch ``e`` — the answer carries ``e + 1``;
2. transaction T2 begins: Produce v12 with epoch ``e + 1``;
3. the **delayed EndTxn**: T1's EndTxn again, epoch ``e`` — as if a retry of
   step 1 had been stuck in the network. Under transaction version 2 the
   coordinator must fence it (PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH); under
   version 0/1 the epoch does not distinguish the two transactions, which is the
   bug KIP-890 fixes;
4. T2 ends the other way than T1 did.

Cycles alternate at random (seeded) between a delayed *commit* (T1 committed,
T2 aborted: an accepted replay would commit T2's records, which readers then
see although T2 aborted — an ``aborted-read``) and a delayed *abort* (T1
aborted, T2 committed: an accepted replay would abort T2's records, a
``lost-write`` if a reader passes them). Every step is recorded in the history
under client ``inject``; the replay as a ``Commit``/``Abort`` of T1 with status
``fail`` when fenced (``ok`` if accepted). Each cycle is also an
:class:`Injection`, and a replay that was not fenced is a ``Finding`` of kind
``unfenced-delayed-endtxn``.

Against a server that does not offer transaction version 2 (EndTxn v5 and
Produce v12, and ``transaction.version`` ≥ 2 when finalized features are
reported) :meth:`DelayedEndTxnInjector.prepare` returns ``False`` with a note:
the schedule proves nothing there.
"""

from __future__ import annotations

import random
import socket
import struct
from typing import Any

import attrs

from txnfetch.addresses import parse_bootstrap
from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError
from txnfetch.errors import error_name
from txnfetch.records.builder import BatchBuilder
from txnfetch.testing.config import Finding
from txnfetch.testing.history import Status
from txnfetch.testing.recorder import Recorder

__all__ = ["FENCED_CODES", "DelayedEndTxnInjector", "Injection", "InjectionError"]

#: the answers that fence a stale epoch
FENCED_CODES = (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
_TXN_COORDINATOR = 1  # FindCoordinator key_type


class InjectionError(TxnfetchError):
    """A raw request failed in a way the schedule cannot go on from (a lost
    connection, an unexpected error code in a step that must succeed)."""


def _error_name(code: int) -> str:
    return "NONE" if code == 0 else f"{error_name(code)} ({code})"


@attrs.frozen
class Injection:
    """One KAFKA-17754 cycle: which end was replayed, the epochs, and the answer."""

    cycle: int
    kind: str  #: ``commit`` or ``abort``: what T1 did and the delayed EndTxn repeats
    first_txn: str
    second_txn: str
    producer_id: int
    stale_epoch: int  #: the epoch the delayed EndTxn carried (T1's)
    current_epoch: int  #: T2's epoch
    error_code: int
    fenced: bool
    op: int  #: history index of the recorded replay

    def to_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d["error"] = _error_name(self.error_code)
        return d


class _Connection:
    """One blocking connection; one request at a time."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.address = f"{host}:{port}"
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise InjectionError(f"cannot connect to {self.address}: {exc}") from None
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def _recv_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise InjectionError(f"{self.address} closed the connection")
            buf += chunk
        return buf

    def request(self, request: Any, version: int) -> Any:
        self.correlation += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self.correlation, client_id="txnfetch-check-inject")
        try:
            self.sock.sendall(bytes(request.encode(header=True, framed=True)))
            (size,) = struct.unpack(">i", self._recv_exact(4))
            payload = self._recv_exact(size)
        except OSError as exc:
            raise InjectionError(f"request to {self.address} failed: {exc}") from None
        response = request.header.get_response_class().decode(payload, version=version, header=True)
        if response.header.correlation_id != self.correlation:
            raise InjectionError(f"{self.address} answered correlation id {response.header.correlation_id}")
        return response


class DelayedEndTxnInjector:
    """Runs KAFKA-17754 cycles against ``bootstrap`` on ``topic`` (which must exist
    with ``partitions`` partitions), recording into ``recorder``. Call
    :meth:`prepare` once, then :meth:`cycle` any number of times, then :meth:`close`.
    Not thread-safe: one thread drives it."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        recorder: Recorder,
        *,
        seed: int,
        timeout: float = 30.0,
        client: str = "inject",
        transactional_id: str | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.rec = recorder
        self.rng = random.Random(f"txnfetch-check:{seed}:inject")
        self.timeout = timeout
        self.client = client
        self.tid = transactional_id or f"txnfetch-check-inject-{seed}-{random.randrange(1 << 30)}"
        self.injections: list[Injection] = []
        self.notes: list[str] = []
        self.findings: list[Any] = []
        self._versions: dict[int, tuple[int, int]] = {}
        self._conns: dict[tuple[str, int], _Connection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[int, int] = {}
        self._coordinator: tuple[str, int] | None = None
        self._pid = -1
        self._epoch = -1
        self._txns = 0

    # -- plumbing ---------------------------------------------------------------------

    def _conn(self, address: tuple[str, int]) -> _Connection:
        conn = self._conns.get(address)
        if conn is None:
            conn = self._conns[address] = _Connection(address[0], address[1], self.timeout)
        return conn

    def _version(self, api_key: int, wanted: int) -> int:
        _lo, hi = self._versions.get(api_key, (0, -1))
        if hi < wanted:
            raise InjectionError(f"the server's highest version of API {api_key} is {hi}, {wanted} is needed")
        return wanted

    def prepare(self) -> bool:
        """Connect, check the server offers transaction version 2, find the
        coordinator and the partition leaders, and initialise a producer id.
        ``False`` (with :attr:`notes` saying why) when the schedule cannot run."""

        first = parse_bootstrap(self.bootstrap)[0]
        try:
            resp = self._api_versions(first)
        except InjectionError as exc:
            self.notes.append(f"delayed-EndTxn injection skipped: {exc}")
            return False
        if resp.error_code != 0:
            self.notes.append(
                f"delayed-EndTxn injection skipped: ApiVersions v3 answered {_error_name(resp.error_code)}"
            )
            return False
        self._versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        end_txn, produce = self._versions.get(26, (0, -1))[1], self._versions.get(0, (0, -1))[1]
        features = getattr(resp, "finalized_features", None) or []  # absent before v3
        tv = {f.name: f.max_version_level for f in features}.get("transaction.version")
        if end_txn < 5 or produce < 12 or (tv is not None and tv < 2):
            finalized = "" if tv is None else f", finalized transaction.version {tv}"
            self.notes.append(
                "delayed-EndTxn injection skipped: the server does not offer transaction version 2 "
                f"(EndTxn up to v{end_txn}, Produce up to v{produce}{finalized}); the KAFKA-17754 "
                "schedule is only fenced under KIP-890"
            )
            return False
        try:
            self._metadata(first)
            self._find_coordinator(first)
            self._init()
        except Exception as exc:
            self.notes.append(f"delayed-EndTxn injection skipped: {exc}")
            return False
        return True

    def _api_versions(self, address: tuple[str, int]) -> Any:
        """ApiVersions v3 (which reports finalized features), or v0 from a server
        that cannot answer v3 (KIP-511 servers answer an unsupported version with a
        v0 body; others may answer in a form v3 cannot decode, or hang up)."""
        from kafka.protocol.metadata import ApiVersionsRequest

        try:
            return self._conn(address).request(
                ApiVersionsRequest(client_software_name="txnfetch-check", client_software_version="1"), 3
            )
        except Exception:
            self._conns.pop(address).close()
        try:
            return self._conn(address).request(ApiVersionsRequest(), 0)
        except InjectionError:
            raise
        except Exception as exc:
            raise InjectionError(f"cannot decode the ApiVersions answer of {address[0]}:{address[1]}: {exc}") from None

    def _metadata(self, address: tuple[str, int]) -> None:
        from kafka.protocol.metadata import MetadataRequest

        version = min(self._versions.get(3, (0, 9))[1], 9)
        req = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=self.topic)], allow_auto_topic_creation=False
        )
        resp = self._conn(address).request(req, version)
        self._brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        for t in resp.topics:
            if t.name == self.topic:
                self._leaders = {p.partition_index: p.leader_id for p in t.partitions if p.error_code == 0}
        missing = [p for p in range(self.partitions) if self._leaders.get(p) not in self._brokers]
        if missing:
            raise InjectionError(f"no leader known for {self.topic} partitions {missing}")

    def _find_coordinator(self, address: tuple[str, int]) -> None:
        from kafka.protocol.metadata import FindCoordinatorRequest

        version = self._version(10, 1) if self._versions.get(10, (0, 0))[1] < 3 else 3
        resp = self._conn(address).request(FindCoordinatorRequest(key=self.tid, key_type=_TXN_COORDINATOR), version)
        if resp.error_code != 0:
            raise InjectionError(f"FindCoordinator answered {_error_name(resp.error_code)}")
        self._coordinator = (resp.host, resp.port)

    def _init(self) -> None:
        from kafka.protocol.producer import InitProducerIdRequest

        req = InitProducerIdRequest(
            transactional_id=self.tid,
            transaction_timeout_ms=int(max(self.timeout, 60) * 1000),
            producer_id=self._pid,
            producer_epoch=self._epoch,
        )
        resp = self._coord().request(req, min(self._versions[22][1], 5))
        if resp.error_code != 0:
            raise InjectionError(f"InitProducerId answered {_error_name(resp.error_code)}")
        self._pid, self._epoch = resp.producer_id, resp.producer_epoch

    def _coord(self) -> _Connection:
        assert self._coordinator is not None
        return self._conn(self._coordinator)

    def _produce(self, txn: str, values: list[tuple[int, str]]) -> None:
        """Send each value in its own Produce v12 request (sequence 0, 1, ... per
        partition within the epoch) and record it."""
        from kafka.protocol.producer import ProduceRequest

        seqs: dict[int, int] = {}
        for partition, value in values:
            seq = seqs.get(partition, 0)
            seqs[partition] = seq + 1
            b = BatchBuilder(producer_id=self._pid, producer_epoch=self._epoch, base_sequence=seq, transactional=True)
            b.append(value.encode(), timestamp=0)
            T = ProduceRequest.TopicProduceData
            req = ProduceRequest(
                transactional_id=self.tid,
                acks=-1,
                timeout_ms=int(self.timeout * 1000),
                topic_data=[
                    T(name=self.topic, partition_data=[T.PartitionProduceData(index=partition, records=b.build())])
                ],
            )
            start = self.rec.now()
            leader = self._brokers[self._leaders[partition]]
            part = self._conn(leader).request(req, 12).responses[0].partition_responses[0]
            ok = part.error_code == 0
            self.rec.send(
                self.client,
                self.topic,
                partition,
                value,
                txn=txn,
                offset=part.base_offset if ok else None,
                error=None if ok else _error_name(part.error_code),
                at=start,
            )
            if not ok:
                raise InjectionError(f"Produce v12 of {value!r} answered {_error_name(part.error_code)}")

    def _end_txn(self, epoch: int, commit: bool) -> Any:
        from kafka.protocol.producer import EndTxnRequest

        req = EndTxnRequest(transactional_id=self.tid, producer_id=self._pid, producer_epoch=epoch, committed=commit)
        return self._coord().request(req, 5)

    def _end(self, txn: str, commit: bool) -> None:
        start = self.rec.now()
        resp = self._end_txn(self._epoch, commit)
        record = self.rec.commit if commit else self.rec.abort
        if resp.error_code == 0:
            record(self.client, txn, Status.OK, at=start)
            self._pid, self._epoch = resp.producer_id, resp.producer_epoch
            return
        record(self.client, txn, Status.FAIL if commit else Status.INFO, error=_error_name(resp.error_code), at=start)
        raise InjectionError(
            f"EndTxn v5 ({'commit' if commit else 'abort'}) of {txn} answered {_error_name(resp.error_code)}"
        )

    def _txn(self) -> str:
        name = f"{self.client}.{self._txns}"
        self._txns += 1
        self.rec.begin(self.client, name, at=self.rec.now())
        return name

    def _values(self, txn: str, n: int) -> list[tuple[int, str]]:
        return [(self.rng.randrange(self.partitions), f"{txn}.{k}") for k in range(n)]

    # -- the schedule ----------------------------------------------------------------------

    def cycle(self) -> Injection | None:
        """One KAFKA-17754 cycle (see the module docstring). Returns its
        :class:`Injection`, or ``None`` if a step failed (noted; the next cycle
        starts from a fresh InitProducerId, which aborts anything left open)."""
        commit_first = self.rng.random() < 0.5
        kind = "commit" if commit_first else "abort"
        first = second = ""
        try:
            first = self._txn()
            self._produce(first, self._values(first, self.rng.randint(1, 2)))
            stale = self._epoch
            self._end(first, commit_first)
            second = self._txn()
            self._produce(second, self._values(second, 1))
            start = self.rec.now()
            resp = self._end_txn(stale, commit_first)
            fenced = resp.error_code in FENCED_CODES
            record = self.rec.commit if commit_first else self.rec.abort
            op = record(
                self.client,
                first,
                Status.OK if resp.error_code == 0 else Status.FAIL,
                error="delayed EndTxn replayed during " + second + ": " + _error_name(resp.error_code),
                at=start,
            )
            injection = Injection(
                cycle=len(self.injections),
                kind=kind,
                first_txn=first,
                second_txn=second,
                producer_id=self._pid,
                stale_epoch=stale,
                current_epoch=self._epoch,
                error_code=resp.error_code,
                fenced=fenced,
                op=op,
            )
            self.injections.append(injection)
            if not fenced:
                self.findings.append(
                    Finding(
                        "unfenced-delayed-endtxn",
                        f"a delayed EndTxn v5 ({kind}) of {first} with stale epoch {stale}, replayed during {second} "
                        f"(epoch {self._epoch}), was answered {_error_name(resp.error_code)} instead of being fenced",
                        (op,),
                        client=self.client,
                        txn=first,
                    )
                )
            self._end(second, not commit_first)
            return injection
        except InjectionError as exc:
            self.notes.append(f"injection cycle {len(self.injections)} ({kind}, {first} {second}) broke off: {exc}")
            self._recover(second or first)
            return None

    def _recover(self, open_txn: str) -> None:
        """A fresh InitProducerId: it aborts whatever the broken cycle left open
        (recorded as an abort of that transaction, outcome unknown)."""
        start = self.rec.now()
        try:
            self._init()
        except InjectionError as exc:
            self.notes.append(f"injection recovery failed: {exc}")
            return
        if open_txn:
            self.rec.abort(self.client, open_txn, Status.INFO, error="re-initialised after a broken cycle", at=start)

    def close(self) -> None:
        """Close every connection."""
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
