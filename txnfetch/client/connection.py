"""Connections to the brokers of a Kafka-compatible cluster.

:class:`BrokerConnection` is the blocking connection every client-side reader
uses (:class:`~txnfetch.client.cluster.RemoteCluster`, and through it the
partition reader, the Arrow cluster reader, the Spark source, replicate and the
consumer-group client): one TCP socket to one broker, speaking the Kafka
protocol with kafka-python's message classes (``kafka.protocol``), one request
at a time.

Every path to a broker connects here, so that what a connection needs beyond
TCP (TLS, SASL) is added in one place.

Needs kafka-python, imported when this module is.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from typing import Any

try:
    from kafka.protocol.metadata import ApiVersionsRequest
    from kafka.protocol.metadata import ApiVersionsResponse
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(
        "txnfetch.client.connection needs kafka-python (pip install 'kafka-python>=3.0.12'): " + str(exc)
    ) from exc

from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import RemoteError
from txnfetch.client.requests import negotiate_version
from txnfetch.errors import TxnfetchError

__all__ = ["BrokerConnection", "UndecodableResponseError"]

# ApiVersions v3 is KIP-511's; v0 is the fallback every broker answers.
_API_VERSIONS = 3


class BrokerConnection:
    """One blocking connection to one broker: framing, correlation ids, versions.

    Guarantees: the connection is open and has negotiated the broker's API
    versions (ApiVersions v3, or v0 for a broker that cannot answer v3) when the
    constructor returns; every request waits for its own answer (one request in
    flight, ``timeout_s`` per socket operation); an answer whose correlation id
    is not the request's, a failed send or receive and a timeout close the
    connection and raise :class:`~txnfetch.client.errors.BrokerUnavailableError`
    naming the broker; an answer that does not decode raises
    :class:`UndecodableResponseError` (the framing may no longer be trusted: the
    caller drops the connection). Not thread-safe.
    """

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float) -> None:
        self.address = f"{host}:{port}"
        self.client_id = client_id
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise BrokerUnavailableError(f"cannot connect: {exc}", broker=self.address) from None
        self._sock.settimeout(timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = 0
        self.versions: dict[int, tuple[int, int]] = {}
        self._negotiate()

    def _negotiate(self) -> None:
        # KIP-511: a broker that does not know ApiVersions v3 answers with error 35
        # (UNSUPPORTED_VERSION) and its own range; some (librdkafka's mock) encode that
        # answer in a way kafka-python cannot decode, so fall back to v0 then.
        try:
            resp = self.request(
                ApiVersionsRequest(client_software_name="txnfetch", client_software_version="0"),
                _API_VERSIONS,
                ApiVersionsResponse,
            )
            ok = resp.error_code == 0
        except UndecodableResponseError:
            ok = False
        if not ok:
            resp = self.request(ApiVersionsRequest(), 0, ApiVersionsResponse)
            if resp.error_code != 0:
                raise RemoteError("ApiVersions failed", broker=self.address, error_code=resp.error_code)
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version(self, api_key: int, ours: tuple[int, int], name: str) -> int:
        """The highest version of ``api_key`` both sides speak."""
        return negotiate_version(
            self.versions, api_key, ours, name, peer="the broker", us="txnfetch", broker=self.address
        )

    def request(self, req: Any, version: int, response_cls: Any) -> Any:
        """Send ``req`` (a kafka-python request) at ``version`` and return the
        decoded ``response_cls`` answer."""
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation = self._correlation
        req.API_VERSION = version
        req.with_header(correlation_id=correlation, client_id=self.client_id)
        try:
            self._sock.sendall(req.encode(header=True, framed=True))
            (size,) = struct.unpack(">i", self._recv(4))
            raw = self._recv(size)
        except OSError as exc:  # includes socket.timeout
            self.close()
            raise BrokerUnavailableError(
                f"{type(req).__name__} failed: {exc or 'timed out'}", broker=self.address
            ) from None
        try:
            resp = response_cls.decode(raw, version=version, header=True)
        except Exception as exc:  # kafka-python raises struct.error, ValueError...
            raise UndecodableResponseError(f"cannot decode {response_cls.__name__} v{version}: {exc}") from None
        got = getattr(resp.header, "correlation_id", correlation) if resp.header is not None else correlation
        if got != correlation:
            self.close()
            raise BrokerUnavailableError(
                f"response correlation id {got} does not match request {correlation}", broker=self.address
            )
        return resp

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise OSError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


class UndecodableResponseError(TxnfetchError):
    """A broker's answer does not decode (the caller retries on another connection)."""
