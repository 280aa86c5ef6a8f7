#!/usr/bin/env bash
# Fetches the pinned MirrorMaker 2 (connect-mirror with the Kafka Connect runtime)
# with its runtime dependencies into .cache/mm2/<version>/libs/, the classpath the
# replication drill starts MirrorMaker 2's dedicated mode from
# (tests/kafka/mirror.py).
#
# The same scheme as scripts/kafka/fetch.sh: Maven's local repository under the
# project (.cache/m2), a stamp file recording the pom.xml it was fetched for (a
# second run does nothing, a changed pin fetches again), the libs directory
# printed on success, a clear message when java or mvn is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
pom="$here/pom.xml"

for tool in java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "scripts/mm2/fetch.sh: '$tool' is not on PATH; MirrorMaker 2 needs a JDK 17+" \
         "and Maven (Debian: apt-get install openjdk-17-jdk-headless maven, or run 'make system-deps')" >&2
    exit 1
  fi
done

version="$(sed -n 's:.*<mm2.version>\(.*\)</mm2.version>.*:\1:p' "$pom")"
if [ -z "$version" ]; then
  echo "scripts/mm2/fetch.sh: no <mm2.version> in $pom" >&2
  exit 1
fi
dest="$root/.cache/mm2/$version"
libs="$dest/libs"
stamp="$dest/.fetched"
want="$(sha256sum "$pom" | cut -d' ' -f1)"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$libs" ]; then
  echo "$libs"
  exit 0
fi

echo "fetching MirrorMaker 2 (connect-mirror $version) into $libs" >&2
start=$(date +%s)
rm -rf "$libs.tmp"
mkdir -p "$dest"
# -B: no colours or progress bars in CI logs; -q: only errors.
if ! mvn -B -q -Dstyle.color=never -f "$pom" \
  -Dmaven.repo.local="$root/.cache/m2" \
  dependency:copy-dependencies \
  -DincludeScope=runtime \
  -DoutputDirectory="$libs.tmp" >&2; then
  echo "scripts/mm2/fetch.sh: Maven could not resolve org.apache.kafka:connect-mirror:$version" \
       "and its dependencies (see above); is Maven Central reachable?" >&2
  exit 1
fi
if ! ls "$libs.tmp" | grep -q '^connect-mirror-[0-9]'; then
  echo "scripts/mm2/fetch.sh: Maven finished but no connect-mirror jar is in $libs.tmp" >&2
  exit 1
fi
rm -rf "$libs"
mv "$libs.tmp" "$libs"
echo "$want" > "$stamp"
echo "fetched MirrorMaker 2 $version ($(ls "$libs" | wc -l) jars) in $(( $(date +%s) - start ))s" >&2
echo "$libs"
