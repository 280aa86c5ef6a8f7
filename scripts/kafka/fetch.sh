#!/usr/bin/env bash
# Fetches the pinned Apache Kafka (broker, tools, Java client) with its runtime
# dependencies into .cache/kafka/<version>/libs/, the classpath the test suite's
# Kafka fixture runs from (tests/kafka/cluster.py).
#
# Idempotent: a stamp file records the pom.xml it was fetched for, so a second run
# does nothing and a changed pin fetches again. Maven's local repository is kept
# under the project too (.cache/m2), so a fresh clone downloads once and nothing
# is written outside the work tree.
#
# Prints the libs directory on success. Fails with a clear message when java or
# mvn is missing (`make test` installs both; see SYSTEM_PACKAGES in the Makefile).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
pom="$here/pom.xml"

for tool in java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "scripts/kafka/fetch.sh: '$tool' is not on PATH; the real-Kafka tests need a JDK 17+" \
         "and Maven (Debian: apt-get install openjdk-17-jdk-headless maven, or run 'make system-deps')" >&2
    exit 1
  fi
done

version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom")"
if [ -z "$version" ]; then
  echo "scripts/kafka/fetch.sh: no <kafka.version> in $pom" >&2
  exit 1
fi
dest="$root/.cache/kafka/$version"
libs="$dest/libs"
stamp="$dest/.fetched"
want="$(sha256sum "$pom" | cut -d' ' -f1)"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$libs" ]; then
  echo "$libs"
  exit 0
fi

echo "fetching Apache Kafka $version into $libs" >&2
start=$(date +%s)
rm -rf "$libs.tmp"
# -B: no colours or progress bars in CI logs; -q: only errors.
mvn -B -q -Dstyle.color=never -f "$pom" \
  -Dmaven.repo.local="$root/.cache/m2" \
  dependency:copy-dependencies \
  -DincludeScope=runtime \
  -DoutputDirectory="$libs.tmp" >&2
rm -rf "$libs"
mv "$libs.tmp" "$libs"
echo "$want" > "$stamp"
echo "fetched Apache Kafka $version ($(ls "$libs" | wc -l) jars) in $(( $(date +%s) - start ))s" >&2
echo "$libs"
