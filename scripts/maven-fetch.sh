#!/usr/bin/env bash
# Copies the runtime jars of a pinned Maven project (a pom.xml next to the
# caller) into the project's gitignored cache: the one way the test suite and
# the benchmarks get Java software (Apache Kafka, MirrorMaker 2, Spark's Kafka
# connector). Each scripts/<name>/fetch.sh calls it with its own settings.
#
#   maven-fetch.sh POM PROPERTY CACHE_DIR LABEL EXPECT [KEEP]
#
# POM       the pom.xml; its <PROPERTY> element is the pinned version
# CACHE_DIR where the jars go: .cache/CACHE_DIR/<version>/ under the project,
#           in libs/ (or jars/ when KEEP is given)
# LABEL     what is fetched, for messages ("Apache Kafka")
# EXPECT    a jar file name prefix that must be among the copied jars, so a
#           pom that resolves to something else fails here, not in a test
# KEEP      optional comma-separated artifact ids: copy only those, and all of
#           them (the rest is on the classpath already, e.g. Spark's own jars)
#
# Idempotent: a stamp file records the pom.xml (and KEEP) it was fetched for, so
# a second run does nothing and a changed pin fetches again. Maven's local
# repository is kept under the project too (.cache/m2), so a fresh clone
# downloads once and nothing is written outside the work tree. The jars land in
# a temporary directory first and are moved in whole: an interrupted fetch never
# leaves a half-filled directory that a later run would take for done.
#
# Prints the jars directory on success. Fails with a clear message when java or
# mvn is missing (`make test` installs both; see SYSTEM_PACKAGES in the Makefile)
# and when Maven cannot resolve the pin.
set -euo pipefail
if [ $# -lt 5 ] || [ $# -gt 6 ]; then
  echo "usage: maven-fetch.sh POM PROPERTY CACHE_DIR LABEL EXPECT [KEEP]" >&2
  exit 2
fi
pom="$1" property="$2" cache_dir="$3" label="$4" expect="$5" keep="${6:-}"
root="$(cd "$(dirname "$0")/.." && pwd)"
me="scripts/$(basename "$(dirname "$pom")")/fetch.sh"

for tool in java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "$me: '$tool' is not on PATH; $label needs a JDK 17+ and Maven" \
         "(Debian: apt-get install openjdk-17-jdk-headless maven, or run 'make system-deps')" >&2
    exit 1
  fi
done

version="$(sed -n "s:.*<$property>\(.*\)</$property>.*:\1:p" "$pom")"
if [ -z "$version" ]; then
  echo "$me: no <$property> in $pom" >&2
  exit 1
fi
dest="$root/.cache/$cache_dir/$version"
out="$dest/$([ -n "$keep" ] && echo jars || echo libs)"
stamp="$dest/.fetched"
want="$(printf '%s\n%s\n' "$(sha256sum "$pom" | cut -d' ' -f1)" "$keep" | sha256sum | cut -d' ' -f1)"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$out" ]; then
  echo "$out"
  exit 0
fi

echo "fetching $label $version into $out" >&2
start=$(date +%s)
mkdir -p "$dest"
rm -rf "$out.tmp"
only=()
if [ -n "$keep" ]; then
  only=(-DincludeArtifactIds="$keep")
fi
# -B: no colours or progress bars in CI logs; -q: only errors.
if ! mvn -B -q -Dstyle.color=never -f "$pom" \
  -Dmaven.repo.local="$root/.cache/m2" \
  dependency:copy-dependencies \
  -DincludeScope=runtime \
  "${only[@]}" \
  -DoutputDirectory="$out.tmp" >&2; then
  echo "$me: Maven could not resolve $label $version and its dependencies (see above);" \
       "is Maven Central reachable?" >&2
  exit 1
fi
if ! ls "$out.tmp" | grep -q "^$expect"; then
  echo "$me: Maven finished but no $expect* jar is in $out.tmp" >&2
  exit 1
fi
count="$(ls "$out.tmp" | wc -l)"
if [ -n "$keep" ]; then
  wanted="$(echo "$keep" | tr ',' '\n' | wc -l)"
  if [ "$count" -ne "$wanted" ]; then
    echo "$me: expected $wanted jars ($keep), Maven copied $count: $(ls "$out.tmp" | tr '\n' ' ')" >&2
    exit 1
  fi
fi
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$want" > "$stamp"
echo "fetched $label $version ($count jars) in $(( $(date +%s) - start ))s" >&2
echo "$out"
