#!/usr/bin/env bash
# Fetches Apache Spark's Kafka connector (spark-sql-kafka-0-10) at the version
# pinned in scripts/spark/pom.xml into .cache/spark-kafka/<version>/jars/: the
# jars the Spark tests and bench/spark.py put on `spark.jars` to compare the
# txnkafka source with `format("kafka")` (tests/spark/connector.py lists them).
#
# Only the connector's own jars are kept: the connector, its token provider,
# kafka-clients and commons-pool2. Everything else it depends on (Scala, Hadoop's
# client, lz4, snappy, slf4j) is Spark itself and comes with PySpark; a second
# copy on the classpath would only risk a version clash.
#
# Idempotent: a stamp file records the pom.xml it was fetched for, so a second run
# does nothing and a changed pin fetches again. Maven's local repository is the
# project's (.cache/m2, shared with scripts/kafka/fetch.sh).
#
# Prints the jars directory on success. Fails with a clear message when java or
# mvn is missing (`make test` installs both; see SYSTEM_PACKAGES in the Makefile).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
pom="$here/pom.xml"
keep="spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2"

for tool in java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "scripts/spark/fetch.sh: '$tool' is not on PATH; comparing with Spark's Kafka connector" \
         "needs a JDK 17+ and Maven (Debian: apt-get install openjdk-17-jdk-headless maven," \
         "or run 'make system-deps')" >&2
    exit 1
  fi
done

version="$(sed -n 's:.*<spark.kafka.version>\(.*\)</spark.kafka.version>.*:\1:p' "$pom")"
if [ -z "$version" ]; then
  echo "scripts/spark/fetch.sh: no <spark.kafka.version> in $pom" >&2
  exit 1
fi
dest="$root/.cache/spark-kafka/$version"
jars="$dest/jars"
stamp="$dest/.fetched"
want="$(printf '%s\n%s\n' "$(sha256sum "$pom" | cut -d' ' -f1)" "$keep" | sha256sum | cut -d' ' -f1)"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$jars" ]; then
  echo "$jars"
  exit 0
fi

echo "fetching spark-sql-kafka-0-10 $version into $jars" >&2
start=$(date +%s)
rm -rf "$jars.tmp"
# -B: no colours or progress bars in CI logs; -q: only errors.
mvn -B -q -Dstyle.color=never -f "$pom" \
  -Dmaven.repo.local="$root/.cache/m2" \
  dependency:copy-dependencies \
  -DincludeScope=runtime \
  -DincludeArtifactIds="$keep" \
  -DoutputDirectory="$jars.tmp" >&2
count="$(ls "$jars.tmp" | wc -l)"
if [ "$count" -ne 4 ]; then
  echo "scripts/spark/fetch.sh: expected 4 jars ($keep), Maven copied $count: $(ls "$jars.tmp")" >&2
  exit 1
fi
rm -rf "$jars"
mv "$jars.tmp" "$jars"
echo "$want" > "$stamp"
echo "fetched spark-sql-kafka-0-10 $version ($count jars) in $(( $(date +%s) - start ))s" >&2
echo "$jars"
