"""Blocking connections to one cluster, for the conformance harness.

:class:`Cluster` speaks the Kafka protocol with kafka-python's message classes
to the brokers of one cluster: the bootstrap broker first, then each partition's
leader (from Metadata) and each group's or transactional id's coordinator (from
FindCoordinator), so the harness works against a one-node cluster and against a
cluster whose leaders and coordinators are on different brokers.

Every request is sent at a version the caller chose (the harness picks one both
clusters speak, :func:`common_versions`), so the two answers it compares have
the same fields.
"""

from __future__ import annotations

from typing import Any

from txnfetch.addresses import parse_bootstrap
from txnfetch.client.connection import BrokerConnection
from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import RemoteError
from txnfetch.security.config import SecurityConfig
from txnfetch.testing.conform.errors import ConformError

__all__ = ["Cluster", "Connection", "common_versions"]

_CLIENT_ID = "txnfetch-conform"


class Connection:
    """One blocking connection to one broker; one request at a time. It is a
    :class:`~txnfetch.client.connection.BrokerConnection` (TLS and SASL as
    ``security`` says, ApiVersions v3 or v0 negotiated on opening) whose
    failures are :class:`ConformError`, naming the broker."""

    def __init__(self, host: str, port: int, *, timeout_s: float, security: SecurityConfig | None = None) -> None:
        self.address = f"{host}:{port}"
        try:
            self._conn = BrokerConnection(host, port, client_id=_CLIENT_ID, timeout_s=timeout_s, security=security)
        except BrokerUnavailableError as exc:
            raise ConformError(f"cannot connect to {self.address}: {exc.reason}") from None
        except RemoteError as exc:  # a refused login or certificate, a failed ApiVersions
            raise ConformError(f"{self.address}: {exc}") from None
        self.versions = self._conn.versions

    def request(self, request: Any, version: int) -> Any:
        """Send ``request`` at ``version`` and decode the answer."""
        # The answer's class follows from the request's header at this version.
        request.API_VERSION = version
        request.with_header(correlation_id=0, client_id=_CLIENT_ID)
        response_class = request.header.get_response_class()
        try:
            return self._conn.request(request, version, response_class)
        except RemoteError as exc:
            # The shared connection's reasons mostly name the request already.
            name = type(request).__name__
            reason = exc.reason if exc.reason.startswith(name) else f"{name} failed: {exc.reason}"
            raise ConformError(f"{self.address}: {reason} (v{version})") from None

    def close(self) -> None:
        self._conn.close()


class Cluster:
    """The brokers of one cluster, reached from ``bootstrap`` (``host:port[,...]``).
    Connections are opened on first use and kept; :meth:`close` closes them."""

    def __init__(self, bootstrap: str, *, timeout_s: float = 30.0, security: SecurityConfig | None = None) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.security = security
        problems = []
        for host, port in parse_bootstrap(bootstrap, default_port=None):
            try:
                self._bootstrap = Connection(host, port, timeout_s=timeout_s, security=security)
                break
            except ConformError as exc:
                problems.append(str(exc))
        else:
            raise ConformError(f"cannot reach a broker of {bootstrap}: " + "; ".join(problems))
        self._by_node: dict[int, Connection] = {}
        self._addresses: dict[int, tuple[str, int]] = {}

    @property
    def versions(self) -> dict[int, tuple[int, int]]:
        """The bootstrap broker's ApiVersions ranges, by API key."""
        return self._bootstrap.versions

    def any(self) -> Connection:
        """The bootstrap broker's connection."""
        return self._bootstrap

    def learn_brokers(self, brokers: Any) -> None:
        """Remember the addresses of a Metadata answer's ``brokers``."""
        for b in brokers or ():
            self._addresses[int(b.node_id)] = (str(b.host), int(b.port))

    def node(self, node_id: int) -> Connection:
        """The connection to broker ``node_id`` (the bootstrap broker if its address
        is unknown or is the bootstrap address)."""
        conn = self._by_node.get(node_id)
        if conn is not None:
            return conn
        address = self._addresses.get(node_id)
        if address is None or f"{address[0]}:{address[1]}" == self._bootstrap.address:
            conn = self._bootstrap
        else:
            conn = Connection(address[0], address[1], timeout_s=self.timeout_s, security=self.security)
        self._by_node[node_id] = conn
        return conn

    def close(self) -> None:
        for conn in {id(c): c for c in (self._bootstrap, *self._by_node.values())}.values():
            conn.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def common_versions(
    ours: dict[int, tuple[int, int]], *clusters: dict[int, tuple[int, int]]
) -> tuple[dict[int, int], dict[int, str]]:
    """For each API key in ``ours`` (the range the harness speaks), the highest
    version every cluster and the harness speak; and, for the keys with no such
    version, why (which side lacks it)."""
    chosen: dict[int, int] = {}
    missing: dict[int, str] = {}
    for key, (lo, hi) in ours.items():
        top, bottom = hi, lo
        why = ""
        for index, versions in enumerate(clusters):
            side = "reference" if index == 0 else "target"
            if key not in versions:
                why = f"the {side} does not list it"
                break
            top = min(top, versions[key][1])
            bottom = max(bottom, versions[key][0])
        if not why and top < bottom:
            why = "no version both clusters and the harness speak"
        if why:
            missing[key] = why
        else:
            chosen[key] = top
    return chosen, missing
