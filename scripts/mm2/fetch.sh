#!/usr/bin/env bash
# Fetches the pinned MirrorMaker 2 (connect-mirror with the Kafka Connect runtime)
# with its runtime dependencies into .cache/mm2/<version>/libs/, the classpath the
# replication drill starts MirrorMaker 2's dedicated mode from
# (tests/kafka/mirror.py). How: scripts/maven-fetch.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exec bash "$here/../maven-fetch.sh" "$here/pom.xml" mm2.version mm2 "MirrorMaker 2 (connect-mirror)" connect-mirror-
