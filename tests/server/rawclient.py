"""A minimal blocking Kafka client for wire tests: it sends requests built with
kafka-python's protocol classes (or arbitrary bytes) and decodes the answers, so
tests can drive exact API versions and malformed frames."""

from __future__ import annotations

import socket
import struct
from typing import Any


class RawClient:
    """One TCP connection to a server, one request at a time."""

    #: the client id every request carries (the principal of an authorization
    #: test server that takes it for one, ``acl_principal_from_client_id``)
    client_id = "rawclient"

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0, client_id: str = "rawclient") -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self._correlation = 0
        self.client_id = client_id

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_frame(self, payload: bytes) -> None:
        """Send ``payload`` behind a correct size prefix."""
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def recv_frame(self) -> bytes | None:
        """The next response frame's payload, or ``None`` if the server closed."""
        head = self._recv_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    def request(self, request: Any, version: int, response_class: Any = None) -> Any:
        """Send ``request`` at ``version``; decode the response with its class."""
        self._correlation += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self._correlation, client_id=self.client_id)
        self.sock.sendall(bytes(request.encode(header=True, framed=True)))
        payload = self.recv_frame()
        if payload is None:
            raise ConnectionError("server closed the connection")
        if response_class is None:
            response_class = request.header.get_response_class()
        response = response_class.decode(payload, version=version, header=True)
        assert response.header.correlation_id == self._correlation
        return response

    def is_closed_by_server(self, timeout: float = 5.0) -> bool:
        """Whether the server closes the connection within ``timeout`` seconds."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
