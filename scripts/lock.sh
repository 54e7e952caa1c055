#!/usr/bin/env bash
# Regenerate a lock file: every runtime and dev dependency, transitive ones included, resolved
# together in a fresh venv from pyproject.toml's ranges, pinned with ==.
#
# Usage: scripts/lock.sh [cpu|image]
#   cpu   (default) constraints.txt: this project's machines, Python 3 on PATH (3.11), the cpu extra
#         (torch 2.13.0 CPU build). Install: pip install -c constraints.txt -e '.[cpu,dev]'
#   image constraints-image.txt: the Vitis AI 3.5 image's versions off the image (Python 3.8 found
#         by scripts/find_python.sh, the image extra: torch 1.13.1, torchvision 0.14.1, numpy 1.22.4,
#         protobuf 3.20.3). Install: pip install -c constraints-image.txt -e '.[image,dev]'
# Then run the tests in a venv installed through the new lock (tests/project/test_install.py checks it).
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-cpu}"
case "$kind" in
    cpu) python=python3; extras="cpu,dev,samples"; out=constraints.txt ;;
    image) python="$(scripts/find_python.sh 3.8)"; extras="image,dev,samples"; out=constraints-image.txt ;;
    *) echo "lock.sh: expected cpu or image, got '$kind'" >&2; exit 2 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv "$tmp/venv"
PIP_NO_CACHE_DIR=1 "$tmp/venv/bin/pip" install --quiet ".[$extras]"
{
  echo "# A lock file: every runtime and dev dependency of pyproject.toml (extras $extras), transitive"
  echo "# ones included, as resolved together by scripts/lock.sh $kind with $("$tmp/venv/bin/python" -V)."
  echo "# Install through it:  pip install -c $out -e '.[${extras%,samples}]'"
  "$tmp/venv/bin/pip" freeze --all --exclude pip --exclude vitis-pipeline | LC_ALL=C sort -f
} > "$out.partial"
mv "$out.partial" "$out"
echo "wrote $out ($(grep -c '==' "$out") pins)"
