#!/usr/bin/env bash
# The package as a release publishes it: `python -m build` makes the sdist and,
# from it, the wheel; `twine check --strict` reads both; the wheel holds lift/
# alone (with the Errors page `python -m lift explain` prints) and no tests or
# docs. Then the wheel, not an editable install, goes into a fresh virtualenv
# with the test extra, and core test files run against it from a copy of
# tests/ outside the clone, so that only the installed `lift` can be imported.
#
#   bash scripts/wheel.sh               # python3; the dist files in a temp dir
#   PYTHON=python3.13 bash scripts/wheel.sh
#   bash scripts/wheel.sh --dist dist   # keep the sdist and wheel in dist/
#   bash scripts/wheel.sh -x -q         # other arguments go to pytest
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
dist="$work/dist"
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --dist) dist="$(mkdir -p "$2" && cd "$2" && pwd)"; shift ;;
        *) args+=("$1") ;;
    esac
    shift
done
# Core files that read nothing of the clone but the tests themselves (the
# others read lift/'s sources or docs/ through the checkout's path).
CORE=(
    tests/capture/test_capture.py     # what is captured, static or dynamic
    tests/lifted/test_transforms.py   # through jit, vmap, grad, scan, ...
    tests/jit/test_jit.py             # lift.jit
    tests/leaks/test_leaks.py         # find_leaks, checked
    tests/leaks/test_plugin.py        # pytest --lift-leaks, from the entry point
    tests/base/test_module.py         # `from lift import lift`
)

echo "== Building the sdist and the wheel" >&2
"$python" -m venv "$work/venv"
venv_python="$work/venv/bin/python"
pip=("$venv_python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install build twine
rm -f "$dist"/jax_lift-*
# Without --sdist or --wheel, build makes the sdist, then the wheel from it.
"$venv_python" -m build --outdir "$dist" "$root" >"$work/build.log" 2>&1 ||
    { cat "$work/build.log"; exit 1; }
sdist=("$dist"/jax_lift-*.tar.gz)
wheel=("$dist"/jax_lift-*.whl)
"$venv_python" -m twine check --strict "${sdist[0]}" "${wheel[0]}"
"$venv_python" - "${wheel[0]}" "$root/docs/errors.md" <<'EOF'
import sys, zipfile
wheel, page = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
tops = {n.split("/")[0] for n in names}
assert {t for t in tops if not t.endswith(".dist-info")} == {"lift"}, tops
stray = [n for n in names if n.startswith(("lift/tests", "lift/docs")) or "__pycache__" in n]
assert not stray, stray
shipped = zipfile.ZipFile(wheel).read("lift/errors.md")
assert shipped == open(page, "rb").read(), "lift/errors.md is not docs/errors.md"
print(f"{wheel.rsplit('/', 1)[-1]}: {len(names)} files, lift/ and its metadata only")
EOF

echo "== Installing the wheel with the test extra into a fresh virtualenv" >&2
"${pip[@]}" install "${wheel[0]}[test]"
mkdir "$work/suite"
cp -R "$root/tests" "$work/suite/"
# The suite's pytest settings (warnings as errors, markers) are pyproject's.
cp "$root/pyproject.toml" "$work/suite/"
cd "$work/suite"
"$venv_python" - "$work/venv" <<'EOF'
import pathlib, sys
import lift
where = pathlib.Path(lift.__file__).resolve()
assert where.is_relative_to(pathlib.Path(sys.argv[1]).resolve()), where
assert "site-packages" in where.parts, where
print(f"lift {lift.__version__} from {where.parent}")
EOF
"$venv_python" -m lift explain leak-report >/dev/null

echo "== Core tests against the installed wheel" >&2
export JAX_CHECK_TRACER_LEAKS=1
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
"$venv_python" -m pytest -p no:cacheprovider "${CORE[@]}" ${args[@]+"${args[@]}"}
