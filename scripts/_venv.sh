# Sourced by the other scripts: make (once) and activate the project's virtualenv.
# Works on a fresh machine with nothing but python3 >= 3.11 and access to PyPI.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${LIFT_VENV:-$root/.venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
fi
# shellcheck disable=SC1091
source "$venv/bin/activate"
python -m pip install --quiet --disable-pip-version-check -e "$root[$1]"
cd "$root"
