#!/usr/bin/env bash
# Print the path of a Python interpreter of the given minor version (default 3.8, the Vitis AI 3.5
# image's), for the image-environment venv of CI and scripts/lock.sh.
#
# Usage: scripts/find_python.sh [3.8]
#   Looks, in order, at pyenv's versions ($PYENV_ROOT or ~/.pyenv), pythonX.Y on PATH, /usr/bin and
#   /usr/local/bin; then tries the OS package (apt-get install pythonX.Y, as root, where apt exists).
#   Each candidate is run and must report that version. Exit 0 and the path on stdout; exit 3 with the
#   places it looked at on stderr when there is none.
set -euo pipefail

want="${1:-3.8}"
case "$want" in
    [0-9].[0-9]|[0-9].[0-9][0-9]) ;;
    *) echo "find_python.sh: expected a version like 3.8, got '$want'" >&2; exit 2 ;;
esac

reports() {  # true when $1 runs and is Python $want
    [ -x "$1" ] && [ "$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$want" ]
}

candidates=()
root="${PYENV_ROOT:-$HOME/.pyenv}"
for dir in "$root"/versions/"$want".*; do
    [ -d "$dir" ] && candidates+=("$dir/bin/python$want")
done
if command -v "python$want" >/dev/null 2>&1; then
    candidates+=("$(command -v "python$want")")
fi
candidates+=("/usr/bin/python$want" "/usr/local/bin/python$want")

for c in "${candidates[@]}"; do
    if reports "$c"; then
        echo "$c"
        exit 0
    fi
done

apt_note="apt-get not tried (not root or no apt-get)"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    if apt-get install -y -q "python$want" "python$want-venv" >/dev/null 2>&1 && reports "/usr/bin/python$want"; then
        echo "/usr/bin/python$want"
        exit 0
    fi
    apt_note="apt-get install python$want failed (the OS has no such package)"
fi
echo "find_python.sh: no Python $want here: looked at ${candidates[*]}; $apt_note." \
     "Install one (pyenv install $want, or your OS's package) and run again" >&2
exit 3
