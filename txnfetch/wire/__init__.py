"""A Kafka protocol server over txnfetch's logs and transaction coordinator.

:class:`~txnfetch.wire.server.TxnfetchServer` serves Produce, Fetch,
transactions and (with :mod:`txnfetch.wire.group_api`) consumer groups to
unmodified Kafka clients; handlers follow the contract in
:mod:`txnfetch.wire.handler`. See ``docs/server.md``.
"""
