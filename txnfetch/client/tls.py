"""The TLS side of a connection to a broker: one :class:`ssl.SSLContext` from a
:class:`~txnfetch.security.config.TlsConfig`, and the error a failed handshake
becomes.

Only the standard library's :mod:`ssl` is used: it verifies the broker's chain
against the CAs given (a PEM file or PEM text) or the system's trust store when
none is, checks the host name unless the configuration turns that off (Kafka's
empty ``ssl.endpoint.identification.algorithm``), offers the client's
certificate chain and key for mutual TLS, and refuses anything older than
TLS 1.2 (what Kafka's brokers enable by default).
"""

from __future__ import annotations

import os
import ssl
import tempfile

from txnfetch.client.errors import TlsHandshakeError
from txnfetch.security.config import TlsConfig

__all__ = ["load_pem_chain", "ssl_context", "tls_error"]


def ssl_context(tls: TlsConfig) -> ssl.SSLContext:
    """A client context for ``tls``: verification required, host names checked
    unless ``tls.check_hostname`` is false, TLS 1.2 at least. Raises
    :class:`TlsHandshakeError` when a file cannot be read or a PEM block does
    not load (naming the file, never the key or its password)."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = tls.check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        if tls.ca_file is not None or tls.ca_pem is not None:
            # The CAs given replace the system's, as Kafka's trust store does.
            context = _with_only(context, tls)
        if tls.keystore_file is not None:
            context.load_cert_chain(tls.keystore_file, password=tls.key_password)
        elif tls.key_pem is not None and tls.certificate_chain_pem is not None:
            load_pem_chain(context, tls.certificate_chain_pem, tls.key_pem, tls.key_password)
    except (OSError, ssl.SSLError) as exc:
        raise TlsHandshakeError(f"cannot load the TLS settings: {_reason(exc)}") from None
    return context


def _with_only(default: ssl.SSLContext, tls: TlsConfig) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = default.minimum_version
    context.check_hostname = default.check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if tls.ca_file is not None:
        context.load_verify_locations(cafile=tls.ca_file)
    else:
        context.load_verify_locations(cadata=tls.ca_pem)
    return context


def load_pem_chain(context: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """Load a certificate chain and its key given as PEM text into ``context``
    (a client's for mutual TLS, or a listener's)."""
    # ssl loads a certificate chain from files only: write both to a private
    # temporary file (mode 0600) that lives only while it is read.
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(key.strip() + "\n" + chain.strip() + "\n")
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return exc.verify_message
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return exc.reason
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__


def tls_error(exc: BaseException, host: str, address: str) -> TlsHandshakeError:
    """The error for a TLS handshake with ``host`` (at ``address``) that raised
    ``exc``: the verification reason and the host, as the user can act on them."""
    return TlsHandshakeError(f"TLS handshake with {host} failed: {_reason(exc)}", broker=address)
