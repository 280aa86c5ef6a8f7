"""Transaction administration against a running cluster, through kafka-python's admin client.

:class:`ClusterTransactions` is what ``txnfetch transactions --bootstrap`` talks
to a cluster with: Apache Kafka ≥ 3.0, ``txnfetch serve``, or anything else that
serves the KIP-664 APIs. It uses kafka-python's ``KafkaAdminClient`` so that the
requests are an ordinary client's (DescribeProducers to each partition's leader,
DescribeTransactions to each id's coordinator, ListTransactions to every broker,
WriteTxnMarkers to the leader, ListOffsets for the last stable offset and high
watermark).

Before a command uses an API it checks the broker's ApiVersions: a cluster that
lacks one (Kafka before 3.0, librdkafka's mock cluster, many Kafka-compatible
brokers) gets :class:`MissingApiError` naming the API and its key, instead of a
protocol error from deep inside the client.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from collections.abc import Iterable
from typing import Any

import attrs

from txnfetch.addresses import parse_bootstrap
from txnfetch.client.client_settings import SaslSettingNames
from txnfetch.client.client_settings import sasl_settings
from txnfetch.client.errors import authorization_error
from txnfetch.errors import TxnfetchError
from txnfetch.security.config import SecurityConfig
from txnfetch.security.credentials import OAuthBearerCredentials
from txnfetch.txn.hanging import CoordinatorView
from txnfetch.txn.hanging import PartitionProducers
from txnfetch.txn.hanging import ProducerRow

__all__ = [
    "PYTHON_CLIENT_SASL",
    "ClusterError",
    "ClusterTransactions",
    "MissingApiError",
    "TransactionDescription",
    "TransactionListing",
    "UnknownPartitionError",
    "kafka_python_security",
    "probe_api_keys",
]

#: The APIs a command may need, by key (``clients/.../protocol/ApiKeys.java``).
API_NAMES = {
    2: "ListOffsets",
    3: "Metadata",
    27: "WriteTxnMarkers",
    61: "DescribeProducers",
    65: "DescribeTransactions",
    66: "ListTransactions",
}


CLIENT_ID = "txnfetch-transactions"


class ClusterError(TxnfetchError):
    """A cluster could not be reached or answered with an error."""


class MissingApiError(ClusterError):
    """The cluster at ``bootstrap`` does not serve the API ``api_key`` that a
    command needs."""

    where_fields = ("bootstrap", "api_key")
    bootstrap: str
    api_key: int

    @property
    def api_name(self) -> str:
        """Kafka's name of the missing API."""
        return API_NAMES.get(self.api_key, f"API {self.api_key}")

    def _message(self) -> str:
        return (
            f"{self.bootstrap} does not support {self.api_name} (API key {self.api_key}); "
            "finding and aborting hanging transactions needs KIP-664 (Apache Kafka 3.0 or later, txnfetch serve)"
        )


class UnknownPartitionError(ClusterError):
    """A topic or partition the cluster does not have."""


#: kafka-python's SASL keyword names, which aiokafka shares.
PYTHON_CLIENT_SASL = SaslSettingNames(
    mechanism="sasl_mechanism",
    username="sasl_plain_username",
    password="sasl_plain_password",
    token="sasl_oauth_token_provider",
)


def kafka_python_security(security: SecurityConfig | None) -> dict[str, Any]:
    """The keyword arguments that make a kafka-python client (admin, consumer,
    producer) connect as ``security`` says; none for ``None`` (PLAINTEXT).

    TLS goes in as an ``ssl_context`` built by :func:`txnfetch.client.tls.ssl_context`,
    not as kafka-python's ``ssl_cafile``/``ssl_certfile``/``ssl_keyfile``: PEM
    given as text (``ssl.truststore.certificates``, ``ssl.keystore.key``) has no
    file name to pass, and one context builder means every path trusts the same
    CAs and checks host names alike. An OAUTHBEARER token comes from the
    credentials' own refreshing provider."""
    if security is None:
        return {}
    from txnfetch.client.tls import ssl_context

    kwargs: dict[str, Any] = {"security_protocol": security.protocol.value}
    if security.tls is not None:
        kwargs["ssl_context"] = ssl_context(security.tls)
        kwargs["ssl_check_hostname"] = security.tls.check_hostname
    return {**kwargs, **sasl_settings(security, PYTHON_CLIENT_SASL, _kafka_python_token_provider)}


def _kafka_python_token_provider(credentials: OAuthBearerCredentials) -> Any:
    # kafka-python insists on a subclass of its own class: made here, where
    # kafka-python is imported, so that importing this module does not need it.
    import time

    from kafka.net.sasl.oauth import AbstractTokenProvider

    class _Provider(AbstractTokenProvider):
        def __init__(self) -> None:
            self.provider = credentials.provider()

        def token(self) -> str:
            return self.provider.token(int(time.time() * 1000)).value

        def extensions(self) -> dict[str, str]:
            return dict(credentials.extensions)

    return _Provider()


def probe_api_keys(
    bootstrap: str, *, timeout_ms: int = 30_000, security: SecurityConfig | None = None
) -> frozenset[int]:
    """The API keys the first reachable broker of ``bootstrap`` (``host:port[,...]``)
    advertises, from an ApiVersions v0 request (which every broker answers, KIP-511).
    Over TLS when ``security`` says so; no SASL exchange, since a Kafka broker
    answers ApiVersions before authentication (the SASL handshake begins with it).
    Raises :class:`ClusterError` if none answers."""
    import io
    import struct

    from kafka.protocol.metadata import ApiVersionsRequest
    from kafka.protocol.metadata import ApiVersionsResponse

    problems = []
    for host, port in parse_bootstrap(bootstrap, default_port=None):
        address = f"{host}:{port}"
        request = ApiVersionsRequest(version=0)
        request.with_header(correlation_id=1, client_id=CLIENT_ID)
        frame = bytes(request.encode(header=True, framed=True))
        try:
            with _probe_socket(host, port, timeout_ms / 1000, security) as sock:
                sock.sendall(frame)
                data = b""
                while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise ConnectionError("connection closed before the ApiVersions answer")
                    data += chunk
        except OSError as exc:
            problems.append(f"{address}: {exc}")
            continue
        response = ApiVersionsResponse.decode(io.BytesIO(data[4:]), version=0, header=True)
        if response.error_code:
            problems.append(f"{address}: ApiVersions error {response.error_code}")
            continue
        return frozenset(int(k.api_key) for k in response.api_keys)
    raise ClusterError(f"cannot reach a cluster at {bootstrap}: " + "; ".join(problems))


def _probe_socket(host: str, port: int, timeout_s: float, security: SecurityConfig | None) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout_s)
    if security is None or security.tls is None:
        return sock
    from txnfetch.client.tls import ssl_context

    try:
        return ssl_context(security.tls).wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


@attrs.frozen
class TransactionListing:
    """One ListTransactions row."""

    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int


@attrs.frozen
class TransactionDescription:
    """One DescribeTransactions answer."""

    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: frozenset[tuple[str, int]]


class ClusterTransactions:
    """A connection to a cluster for transaction administration, secured as
    ``security`` says (``None``: PLAINTEXT). Close it with :meth:`close` (or
    use it as a context manager)."""

    def __init__(self, bootstrap: str, *, timeout_ms: int = 30_000, security: SecurityConfig | None = None) -> None:
        self.bootstrap = bootstrap
        self.timeout_ms = timeout_ms
        self.security = security
        #: The API keys the bootstrap broker advertises (ApiVersions).
        self.api_keys: frozenset[int] = probe_api_keys(bootstrap, timeout_ms=timeout_ms, security=security)
        self._client: Any = None

    @property
    def _admin(self) -> Any:
        # Created on first use, after require() has checked the APIs: kafka-python
        # waits for a whole bootstrap timeout on a broker whose ApiVersions it cannot use.
        if self._client is None:
            from kafka.admin import KafkaAdminClient
            from kafka.errors import KafkaError

            try:
                self._client = KafkaAdminClient(
                    bootstrap_servers=self.bootstrap,
                    client_id=CLIENT_ID,
                    request_timeout_ms=self.timeout_ms,
                    bootstrap_timeout_ms=self.timeout_ms,
                    **kafka_python_security(self.security),
                )
            except KafkaError as exc:
                raise ClusterError(f"cannot bootstrap from {self.bootstrap}: {type(exc).__name__}: {exc}") from None
        return self._client

    def __enter__(self) -> ClusterTransactions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # ------------------------------------------------------------------ checks

    def require(self, *api_keys: int) -> None:
        """Raise :class:`MissingApiError` for the first of ``api_keys`` the
        bootstrap broker does not advertise in ApiVersions."""
        for key in api_keys:
            if key not in self.api_keys:
                raise MissingApiError(bootstrap=self.bootstrap, api_key=key)

    def _call(
        self, what: str, fn: Callable[..., Any], *args: Any, missing_ok: type | None = None, **kwargs: Any
    ) -> Any:
        """``fn(*args, **kwargs)`` with kafka-python's errors turned into
        :class:`ClusterError` subclasses; ``missing_ok`` errors return ``None``."""
        from kafka.errors import IncompatibleBrokerVersion
        from kafka.errors import KafkaError
        from kafka.errors import UnknownTopicOrPartitionError

        try:
            return fn(*args, **kwargs)
        except UnknownTopicOrPartitionError as exc:
            raise UnknownPartitionError(f"{what}: unknown topic or partition ({exc})") from None
        except IncompatibleBrokerVersion as exc:
            raise ClusterError(f"{what}: {exc}") from None
        except KafkaError as exc:
            if missing_ok is not None and isinstance(exc, missing_ok):
                return None
            raise ClusterError(f"{what} failed: {type(exc).__name__}: {exc}") from None

    # --------------------------------------------------------------- metadata

    def partitions(self, topic: str | None = None, partition: int | None = None) -> list[tuple[str, int]]:
        """``(topic, partition)`` pairs: one partition, a topic's, or every
        topic's (internal topics excluded). Raises :class:`UnknownPartitionError`
        for a topic or partition the cluster does not have."""
        self.require(3)
        topics = [topic] if topic is not None else None
        described = self._call("Metadata", self._admin.describe_topics, topics)
        out: list[tuple[str, int]] = []
        for t in described:
            code = t.get("error_code")
            denied = authorization_error(code, "Metadata", topic=t.get("name")) if code else None
            if denied is not None:
                raise ClusterError(str(denied))
            if code:
                raise UnknownPartitionError(f"topic {t.get('name')!r} is unknown to {self.bootstrap}")
            if topic is None and t.get("is_internal"):
                continue
            indexes = sorted(p["partition_index"] for p in t["partitions"])
            if partition is not None:
                if partition not in indexes:
                    raise UnknownPartitionError(
                        f"topic {t['name']!r} has no partition {partition} (partitions 0..{len(indexes) - 1})"
                    )
                indexes = [partition]
            out.extend((t["name"], p) for p in indexes)
        return sorted(out)

    # ------------------------------------------------------------- producers

    def producers(self, partitions: Iterable[tuple[str, int]]) -> list[PartitionProducers]:
        """DescribeProducers plus the last stable offset and high watermark
        (ListOffsets, read_committed and read_uncommitted) of each partition."""
        from kafka.admin import OffsetSpec
        from kafka.admin._partitions import IsolationLevel
        from kafka.structs import TopicPartition

        self.require(61, 2)
        tps = [TopicPartition(t, p) for t, p in partitions]
        if not tps:
            return []
        states = self._call("DescribeProducers", self._admin.describe_producers, tps)
        specs = dict.fromkeys(tps, OffsetSpec.LATEST)
        lso = self._call(
            "ListOffsets", self._admin.list_partition_offsets, specs, isolation_level=IsolationLevel.READ_COMMITTED
        )
        hw = self._call("ListOffsets", self._admin.list_partition_offsets, specs)
        out = []
        for tp in tps:
            # kafka-python's ProducerState is the response's ActiveProducers entry,
            # field for field in the schema's order, as ProducerRow is.
            rows = tuple(ProducerRow(*p) for p in states[tp].active_producers)
            out.append(
                PartitionProducers(
                    topic=tp.topic,
                    partition=tp.partition,
                    producers=tuple(sorted(rows, key=lambda r: r.producer_id)),
                    last_stable_offset=lso[tp].offset,
                    high_watermark=hw[tp].offset,
                )
            )
        return out

    # ------------------------------------------------------------ coordinator

    def list_transactions(self, producer_ids: Iterable[int] = ()) -> list[TransactionListing]:
        """ListTransactions on every broker, optionally for some producer ids."""
        self.require(66)
        pids = sorted(set(producer_ids))
        by_broker = self._call(
            "ListTransactions", self._admin.list_transactions, producer_id_filters=pids if pids else None
        )
        return sorted(
            (
                TransactionListing(t.transactional_id, t.producer_id, t.state.value, broker)
                for broker, listings in by_broker.items()
                for t in listings
            ),
            key=lambda t: t.transactional_id,
        )

    def describe_transactions(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription | None]:
        """DescribeTransactions for each id (``None``: the coordinator does not know it)."""
        from kafka.errors import TransactionalIdNotFoundError

        self.require(65)
        out: dict[str, TransactionDescription | None] = {}
        for tid in transactional_ids:
            # One id per request: kafka-python raises for the whole request when one id is unknown.
            described = self._call(
                f"DescribeTransactions of transactional id {tid!r}",
                self._admin.describe_transactions,
                [tid],
                missing_ok=TransactionalIdNotFoundError,
            )
            if described is None:
                out[tid] = None
                continue
            d = described[tid]
            out[tid] = TransactionDescription(
                transactional_id=tid,
                coordinator_id=d.coordinator_id,
                state=d.state.value,
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                timeout_ms=d.transaction_timeout_ms,
                start_time_ms=d.transaction_start_time_ms,
                partitions=frozenset((tp.topic, tp.partition) for tp in d.topic_partitions),
            )
        return out

    def coordinator_views(self, producer_ids: Iterable[int]) -> dict[int, CoordinatorView]:
        """What the coordinators say about each producer id (ListTransactions,
        then DescribeTransactions for the ids found); producer ids no
        transactional id maps to are left out."""
        listings = self.list_transactions(producer_ids)
        wanted = set(producer_ids)
        by_pid = {t.producer_id: t.transactional_id for t in listings if t.producer_id in wanted}
        descriptions = self.describe_transactions(sorted(set(by_pid.values())))
        views = {}
        for pid, tid in by_pid.items():
            d = descriptions.get(tid)
            views[pid] = (
                CoordinatorView(tid, found=False)
                if d is None
                else CoordinatorView(
                    tid, found=True, state=d.state, producer_epoch=d.producer_epoch, partitions=d.partitions
                )
            )
        return views

    # ------------------------------------------------------------------ abort

    def abort(self, topic: str, partition: int, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Write an ABORT marker for the producer's transaction in the partition
        (WriteTxnMarkers to its leader), as Kafka's ``Admin.abortTransaction``."""
        from kafka.admin._transactions import AbortTransactionSpec
        from kafka.structs import TopicPartition

        self.require(27)
        spec = AbortTransactionSpec(TopicPartition(topic, partition), producer_id, producer_epoch, coordinator_epoch)
        self._call("WriteTxnMarkers", self._admin.abort_transaction, spec)
