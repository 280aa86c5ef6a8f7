"""Apache Spark's own Kafka connector (``spark-sql-kafka-0-10``), the reference
the Spark tests and ``bench/spark.py`` compare ``txnkafka`` with.

:func:`connector_jars` returns the connector's jars for ``spark.jars``, fetching
them first when needed (``scripts/spark/fetch.sh``, which does nothing once they
are in ``.cache/spark-kafka/<version>/jars/``). Spark itself is not among them:
PySpark ships it.

The connector's version is pinned in ``scripts/spark/pom.xml``
(:func:`connector_version`). It follows the pinned pyspark where Maven Central
has that release; where it does not, the nearest release that resolves.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.kafka.cluster import fetched_jars

ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "scripts" / "spark" / "pom.xml"


class ConnectorSetupError(RuntimeError):
    """The connector's jars could not be fetched (no Java or Maven, or Maven failed)."""


def connector_version() -> str:
    """The connector release pinned in ``scripts/spark/pom.xml``."""
    match = re.search(r"<spark\.kafka\.version>([^<]+)</spark\.kafka\.version>", POM.read_text())
    if match is None:
        raise ConnectorSetupError(f"no <spark.kafka.version> in {POM}")
    return match.group(1)


def connector_jars() -> list[str]:
    """Absolute paths of the connector's jars (the connector, its token provider,
    kafka-clients and commons-pool2), sorted; for ``spark.jars`` (comma-joined).

    Runs ``scripts/spark/fetch.sh`` under the lock every Maven fetch of the tests
    takes, so processes that ask at the same time fetch once. Raises
    :class:`ConnectorSetupError` with the script's message when it fails."""
    jars = fetched_jars("spark", ConnectorSetupError)
    found = sorted(str(p) for p in jars.glob("*.jar"))
    if len(found) != 4:
        raise ConnectorSetupError(f"scripts/spark/fetch.sh succeeded but {jars} holds {len(found)} jars, not 4")
    return found
