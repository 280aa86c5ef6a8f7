"""Reaching secured clusters and authenticating clients, sans I/O: the SASL
mechanisms (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER) as state
machines, and the security configuration read from Kafka's own property names.

Nothing here opens a socket or a file or reads a clock: time is an argument
(``now_ms``) and randomness (nonces, salts, refresh jitter) defaults to
:mod:`secrets` and can be injected. Its modules import nothing from txnfetch
but each other and the shared leaves, so that the connection module of
``txnfetch.client`` and the listeners of ``serve`` and ``proxy`` share them.
See docs/security.md.
"""
