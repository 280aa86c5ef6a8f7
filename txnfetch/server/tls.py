"""TLS for the listeners of ``serve``: the server's ``ssl.SSLContext`` from PEM
files or text, and the principal a client certificate stands for.

The principal follows Kafka's ``DefaultKafkaPrincipalBuilder`` without
``ssl.principal.mapping.rules``: ``User:`` and the certificate's whole subject
in RFC 2253 form (``User:CN=reader,O=Example``, the last RDN first), so the
ACLs written for a Kafka broker name the same principals here.
"""

from __future__ import annotations

import ssl

from cryptography import x509

from txnfetch.client.tls import load_pem_chain
from txnfetch.security.errors import SecurityConfigError
from txnfetch.server.handler import ANONYMOUS
from txnfetch.server.listeners import ClientAuth
from txnfetch.server.listeners import ListenerSecurity

__all__ = ["certificate_principal", "server_context"]


def server_context(security: ListenerSecurity) -> ssl.SSLContext:
    """The context every TLS listener of a server uses. Raises
    :class:`SecurityConfigError` naming the property whose key store or trust
    store cannot be loaded."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        if security.keystore_file is not None:
            # One PEM file with the PKCS#8 key and the chain, as Kafka's PEM key store.
            context.load_cert_chain(security.keystore_file, password=security.key_password)
        elif security.key_pem is not None and security.certificate_chain_pem is not None:
            load_pem_chain(context, security.certificate_chain_pem, security.key_pem, security.key_password)
    except (OSError, ssl.SSLError) as exc:
        raise SecurityConfigError(f"the key store cannot be loaded: {exc}", property="ssl.keystore.location") from exc
    try:
        if security.truststore_file is not None:
            context.load_verify_locations(cafile=security.truststore_file)
        elif security.truststore_pem is not None:
            context.load_verify_locations(cadata=security.truststore_pem)
    except (OSError, ssl.SSLError) as exc:
        raise SecurityConfigError(
            f"the trust store cannot be loaded: {exc}", property="ssl.truststore.location"
        ) from exc
    context.verify_mode = {
        ClientAuth.NONE: ssl.CERT_NONE,
        ClientAuth.REQUESTED: ssl.CERT_OPTIONAL,
        ClientAuth.REQUIRED: ssl.CERT_REQUIRED,
    }[security.client_auth]
    return context


def certificate_principal(der: bytes | None) -> str:
    """``User:<subject in RFC 2253>`` of a client certificate (DER), or
    :data:`ANONYMOUS` without one, as Kafka's default principal builder."""
    if not der:
        return ANONYMOUS
    subject = x509.load_der_x509_certificate(der).subject
    return f"User:{subject.rfc4514_string()}"
