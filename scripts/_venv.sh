# Sourced by the other scripts: make (once) and activate the project's virtualenv,
# and install lift (editable) with the extra named in $1.
# Works on a fresh machine with nothing but python3 >= 3.11 (with its venv module:
# `python3-venv` on Debian and Ubuntu) and access to PyPI. LIFT_VENV chooses
# another virtualenv directory.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${LIFT_VENV:-$root/.venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -c 'import sys; assert sys.version_info >= (3, 11), "lift needs Python 3.11 or later, this python3 is " + sys.version.split()[0]'
    echo "Creating $venv and installing lift[$1] (a few minutes, once)..." >&2
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
fi
# shellcheck disable=SC1091
source "$venv/bin/activate"
python -m pip install --quiet --disable-pip-version-check -e "$root[$1]"
cd "$root"
