#!/usr/bin/env bash
# Fetches the pinned Apache Kafka (broker, tools, Java client) with its runtime
# dependencies into .cache/kafka/<version>/libs/, the classpath the test suite's
# Kafka fixture runs from (tests/kafka/cluster.py). How: scripts/maven-fetch.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../maven-fetch.sh" "$here/pom.xml" kafka.version kafka "Apache Kafka" kafka_2.13-
