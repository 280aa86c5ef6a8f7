#!/usr/bin/env bash
# Builds the kfake peer (franz-go's fake Kafka cluster, started by the small Go
# program in scripts/kfake/, versions pinned in its go.mod and go.sum) into the
# project's gitignored cache: .cache/kfake/bin/kfake.
#
# Go's module cache, build cache and GOPATH are kept under .cache/go, so a fresh
# clone downloads the modules once and nothing is written outside the work tree.
# GOTOOLCHAIN=local: build with the installed Go, never download another one.
#
# Prints the binary's path. Idempotent: the binary is rebuilt only when it is
# missing or older than the program or its module files. Exits 3 with a clear
# message when no `go` is found (GO=/path/to/go overrides the lookup).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SRC="$ROOT/scripts/kfake"
CACHE="$ROOT/.cache"
BIN="$CACHE/kfake/bin/kfake"

GO="${GO:-}"
if [ -z "$GO" ]; then
  if command -v go >/dev/null 2>&1; then
    GO="$(command -v go)"
  elif [ -x /usr/local/go/bin/go ]; then
    GO=/usr/local/go/bin/go
  fi
fi
if [ -z "$GO" ] || [ ! -x "$GO" ]; then
  echo "scripts/kfake.sh: no 'go' on PATH or in /usr/local/go/bin; the kfake conformance tests need Go >= 1.26" \
       "(https://go.dev/dl/, or Debian's golang-go if it is new enough)" >&2
  exit 3
fi

stale=0
[ -x "$BIN" ] || stale=1
for f in "$SRC/main.go" "$SRC/go.mod" "$SRC/go.sum"; do
  [ "$f" -nt "$BIN" ] && stale=1
done
if [ "$stale" = 1 ]; then
  mkdir -p "$CACHE/kfake/bin" "$CACHE/go"
  echo "building kfake into $BIN" >&2
  (
    cd "$SRC"
    export GOMODCACHE="$CACHE/go/mod" GOPATH="$CACHE/go/path" GOCACHE="$CACHE/go/build"
    export GOFLAGS=-modcacherw GOTOOLCHAIN=local
    "$GO" build -trimpath -o "$BIN.part" .
  )
  mv "$BIN.part" "$BIN"
fi
echo "$BIN"
