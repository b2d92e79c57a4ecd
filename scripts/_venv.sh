# Sourced by the other scripts: make (once) and activate a virtualenv, and install
# lift (editable) with the extra named in $1.
#
# Works on a fresh machine with nothing but python3 >= 3.11 (with its venv module:
# `python3-venv` on Debian and Ubuntu) and access to PyPI. The install is redone
# only when pyproject.toml, the extras or the JAX asked for change: an unchanged
# environment starts at once, without the package index.
#
#   LIFT_PYTHON=3.13   another Python: `python3.13` on PATH, or pyenv's newest 3.13
#   LIFT_JAX=0.8.0     a JAX release (`oldest`: the oldest pyproject.toml declares;
#                      `newest`: upgraded to the newest on every run, which asks
#                      the package index); unset: the newest when first installed
#   LIFT_VENV=DIR      the virtualenv's directory (default: .venv, or
#                      .venv-py3.13, .venv-py3.11-jax0.8.0, ... for the above)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
extra="$1"

# The oldest JAX that pyproject.toml declares (`jax>=X`).
lift_oldest_jax() {
    sed -n 's/^ *"jax>=\([0-9.]*\)",.*/\1/p' "$root/pyproject.toml" | head -n 1
}

# The interpreter for Python $1 (e.g. 3.13): on PATH, or pyenv's newest of that
# minor version. Fails, saying what to install, when there is neither.
lift_find_python() {
    local want="$1" exe version
    if command -v "python$want" >/dev/null 2>&1 && "python$want" -c '' 2>/dev/null; then
        command -v "python$want"
        return
    fi
    if command -v pyenv >/dev/null 2>&1; then
        version="$(pyenv versions --bare 2>/dev/null | grep -E "^${want//./\\.}(\.[0-9]+)?$" | sort -V | tail -n 1 || true)"
        exe="$(pyenv root)/versions/$version/bin/python$want"
        if [ -n "$version" ] && [ -x "$exe" ]; then
            echo "$exe"
            return
        fi
    fi
    echo "error: Python $want is needed and neither python$want on PATH nor pyenv has it." >&2
    echo "Install it (python.org, your package manager, or \`pyenv install $want\`) and run again." >&2
    return 1
}

python="python3"
suffix=""
if [ -n "${LIFT_PYTHON:-}" ]; then
    python="$(lift_find_python "$LIFT_PYTHON")"
    suffix="-py$LIFT_PYTHON"
fi
jax_pin=()
if [ "${LIFT_JAX:-}" = newest ]; then
    :
elif [ -n "${LIFT_JAX:-}" ]; then
    jax_version="$LIFT_JAX"
    [ "$jax_version" = "oldest" ] && jax_version="$(lift_oldest_jax)"
    jax_pin=("jax==$jax_version" "jaxlib==$jax_version")
    suffix="$suffix-jax$jax_version"
fi
venv="${LIFT_VENV:-$root/.venv$suffix}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -c 'import sys; assert sys.version_info >= (3, 11), "lift needs Python 3.11 or later, this one is " + sys.version.split()[0]'
    echo "Creating $venv and installing lift[$extra] (a few minutes, once)..." >&2
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
fi
# shellcheck disable=SC1091
source "$venv/bin/activate"
stamp="$venv/.lift-install"
want="$extra ${jax_pin[*]+${jax_pin[*]}} $(cksum <"$root/pyproject.toml")"
if [ ! -f "$stamp" ] || ! grep -qxF -- "$want" "$stamp"; then
    python -m pip install --quiet --disable-pip-version-check \
        -e "$root[$extra]" ${jax_pin[@]+"${jax_pin[@]}"}
    # Every extra installed so far, one a line: asking again for one of them
    # installs nothing.
    echo "$want" >>"$stamp"
fi
if [ "${LIFT_JAX:-}" = newest ]; then
    python -m pip install --quiet --disable-pip-version-check --upgrade jax jaxlib
fi
cd "$root"
