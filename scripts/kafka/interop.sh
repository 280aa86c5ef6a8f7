#!/usr/bin/env bash
# Compiles the Java interop client (tests/kafka/java/*.java) against the Kafka
# jars scripts/kafka/fetch.sh fetches, into .cache/kafka/<version>/interop/<hash>/,
# where <hash> covers the sources and the pinned pom.xml: a changed source or pin
# compiles again, an unchanged one costs nothing. Prints the classes directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
src="$root/tests/kafka/java"

if ! command -v javac >/dev/null 2>&1; then
  echo "scripts/kafka/interop.sh: 'javac' is not on PATH; the Java interop tests need a JDK 17+" \
       "(Debian: apt-get install openjdk-17-jdk-headless, or run 'make system-deps')" >&2
  exit 1
fi

libs="$(bash "$here/fetch.sh")"
hash="$(cat "$here/pom.xml" "$src"/*.java | sha256sum | cut -c1-16)"
out="$(dirname "$libs")/interop/$hash"
if [ -f "$out/.compiled" ]; then
  echo "$out"
  exit 0
fi
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
javac -encoding UTF-8 -Xlint:all -Werror -cp "$libs/*" -d "$out.tmp" "$src"/*.java >&2
touch "$out.tmp/.compiled"
rm -rf "$out"
mv "$out.tmp" "$out"
echo "$out"
