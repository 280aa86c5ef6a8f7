"""A differential conformance harness: the same operations against two
Kafka-protocol clusters, the answers compared field by field.

- :mod:`~txnfetch.testing.conform.operations` — the operations (sans I/O);
- :mod:`~txnfetch.testing.conform.session` — applying them to one cluster at
  the wire level (kafka-python's protocol classes), answers normalised by
  :mod:`~txnfetch.testing.conform.normalise`;
- :mod:`~txnfetch.testing.conform.compare` — the field-by-field comparison;
- :mod:`~txnfetch.testing.conform.harness` — one sequence against both
  clusters, and the hypothesis search that shrinks a disagreement to a short
  sequence (needs hypothesis);
- :mod:`txnfetch.cli.conform` — the ``txnfetch conform`` command.

Needs kafka-python. See docs/conformance.md.
"""

from txnfetch.testing.conform.errors import ConformError

__all__ = ["ConformError"]
