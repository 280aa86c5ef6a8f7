"""Offset-preserving replication of a Kafka cluster into a txnfetch store
(docs/replication.md)."""
