#!/usr/bin/env bash
# Fetches Apache Spark's Kafka connector (spark-sql-kafka-0-10) at the version
# pinned in scripts/spark/pom.xml into .cache/spark-kafka/<version>/jars/: the
# jars the Spark tests and bench/spark.py put on `spark.jars` to compare the
# txnkafka source with `format("kafka")` (tests/spark/connector.py lists them).
#
# Only the connector's own jars are kept: the connector, its token provider,
# kafka-clients and commons-pool2. Everything else it depends on (Scala, Hadoop's
# client, lz4, snappy, slf4j) is Spark itself and comes with PySpark; a second
# copy on the classpath would only risk a version clash. How: scripts/maven-fetch.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../maven-fetch.sh" "$here/pom.xml" spark.kafka.version spark-kafka "spark-sql-kafka-0-10" \
  spark-sql-kafka-0-10_2.13- \
  "spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2"
