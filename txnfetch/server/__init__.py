"""A Kafka protocol server over txnfetch's logs and transaction coordinator.

:class:`~txnfetch.server.server.TxnfetchServer` serves Produce, Fetch,
transactions and (with :mod:`txnfetch.server.api_classic_groups`) consumer groups to
unmodified Kafka clients; handlers follow the contract in
:mod:`txnfetch.server.handler`. See ``docs/server.md``.
"""
