#!/usr/bin/env bash
# Regenerate constraints.txt, the lock file of CPU installs: every runtime and dev dependency, transitive
# ones included, resolved together in a fresh venv from pyproject.toml's ranges, pinned with ==.
#   scripts/lock.sh            # then run the tests: python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e '.[cpu,dev]' ...
# Not for the Vitis AI image, which keeps its own torch, numpy and protobuf (docker/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
PIP_NO_CACHE_DIR=1 "$tmp/venv/bin/pip" install --quiet '.[cpu,dev,samples]'
{
  echo "# The lock file of CPU installs: every runtime and dev dependency of pyproject.toml (extras cpu, dev,"
  echo "# samples), transitive ones included, as resolved together by scripts/lock.sh with $("$tmp/venv/bin/python" -V)."
  echo "# Install through it:  pip install -c constraints.txt -e '.[cpu,dev]'   (not in the Vitis AI image)"
  "$tmp/venv/bin/pip" freeze --all --exclude pip --exclude vitis-pipeline | LC_ALL=C sort -f
} > constraints.txt.partial
mv constraints.txt.partial constraints.txt
echo "wrote constraints.txt ($(grep -c '==' constraints.txt) pins)"
