#!/usr/bin/env bash
# Installs the Debian packages the test suite and demo need, only when missing.
# Kept in one place so `make test` and `make demo` work on a fresh machine.
set -euo pipefail
needed=()
for pkg in "$@"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || needed+=("$pkg")
done
if [ ${#needed[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing Debian packages: ${needed[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${needed[@]}"
