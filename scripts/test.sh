#!/usr/bin/env bash
# Run lift's tests the way CI does: checked for leaked tracers, with every fast
# path checked against the full walk (`LIFT_VERIFY=1`) and with eight host
# devices. Needs only the `test` extra (CI's linters and docs build live
# in .ci/run).
#
# By default it runs the core, what a user relies on: capture, transforms,
# `lift.jit`, closure conversion, leak checking and the error messages (the
# files in CORE below; a few minutes on 2 cores). `--all` runs the whole suite.
#
# Leak checking (`--leaks`): `jax`, the default, runs under JAX's own checker
# (`JAX_CHECK_TRACER_LEAKS=1`); `lift` runs under lift's own pytest plugin in its
# default mode (`--lift-leaks`, fast) with JAX's checker off, as a user's suite
# runs it; `both` runs under JAX's checker with the plugin on too (each test
# then runs inside `lift.checking_leaks()`). `--ends` runs the whole suite at
# the oldest end with `lift` and at the newest with `jax` (the benchmarks' smoke
# run at the newest only).
#
#   bash scripts/test.sh                  # the core, with python3 and the newest
#                                         # JAX pip finds for it (--quick: the same)
#   bash scripts/test.sh --all            # the whole suite
#   bash scripts/test.sh --python 3.13    # another Python (python3.13 on PATH, or
#                                         # pyenv's), in a virtualenv of its own
#   bash scripts/test.sh --jax 0.8.0      # another JAX (`oldest`: the oldest that
#                                         # pyproject.toml declares, `newest`)
#   bash scripts/test.sh --leaks lift     # under lift's plugin (`jax`, `both`)
#   bash scripts/test.sh --ends           # what CI runs: the whole suite on the
#                                         # oldest JAX on Python 3.11 (--leaks
#                                         # lift) and on the newest JAX on
#                                         # Python 3.13 (--leaks jax)
#
# Other arguments go to pytest (`bash scripts/test.sh -x`); given a test file or
# folder, it runs that instead of the core
# (`bash scripts/test.sh tests/jit/test_jit.py -k donation`).
set -euo pipefail
here="$(dirname "$0")"
# The core: what a user relies on.
CORE=(
    tests/capture/test_capture.py           # what is captured, static or dynamic
    tests/lifted/test_soundness.py          # a lifted function computes what the original does
    tests/lifted/test_transforms.py         # through jit, vmap, grad, scan, ...
    tests/diagnose/test_diff.py             # why two lifted functions compile apart
    tests/jit/test_jit.py                   # lift.jit
    tests/capture/test_convert.py           # lift.closure_convert
    tests/leaks/test_leaks.py               # find_leaks, checked
    tests/leaks/test_checking.py            # checking_leaks
    tests/leaks/test_plugin.py              # pytest --lift-leaks
    tests/capture/test_errors_messages.py   # what each error says
)
args=()
ends=0
whole=0
leaks=jax
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) whole=0 ;; # the default; kept for older command lines
        --all) whole=1 ;;
        --python) export LIFT_PYTHON="$2"; shift ;;
        --jax) export LIFT_JAX="$2"; shift ;;
        --leaks) leaks="$2"; shift ;;
        --ends) ends=1 ;;
        *) args+=("$1") ;;
    esac
    shift
done
case "$leaks" in
    jax | lift | both) ;;
    *) echo "error: --leaks takes jax, lift or both, not '$leaks'" >&2; exit 2 ;;
esac

if [ "$ends" = 1 ]; then
    # The two ends of what lift supports (pyproject.toml's `requires-python` and
    # `jax>=`), side by side (each is mostly one core's work), each end's output
    # shown whole when it is done.
    logs="$(mktemp -d)"
    ends_run=("3.11 oldest" "3.13 newest")
    # The leak checking of each end (--leaks): lift's plugin, as users run it,
    # at one; JAX's own checker at the other. (JAX's turns its caches off and
    # collects garbage at every trace exit: on the oldest JAX the suite took
    # 2 036 s under it against 1 168 s under the plugin, on the newest 1 332 s.)
    ends_leaks=(lift jax)
    # The benchmarks' smoke run (every benchmark module at tiny sizes, in a
    # process of its own: about a minute) at the newest end only, where the
    # benchmarks' published numbers are measured; the rest of
    # tests/test_benchmarks.py runs at both.
    smoke=tests/test_benchmarks.py::test_every_benchmark_runs_in_the_smoke_run
    ends_extra=("--deselect=$smoke" "")
    pids=()
    for i in "${!ends_run[@]}"; do
        read -r python jax <<<"${ends_run[$i]}"
        # --durations: the slowest tests of each end, in CI's log.
        bash "$here/test.sh" --all --python "$python" --jax "$jax" \
            --leaks "${ends_leaks[$i]}" --durations=15 ${ends_extra[$i]:+"${ends_extra[$i]}"} \
            ${args[@]+"${args[@]}"} >"$logs/$python.log" 2>&1 &
        pids+=($!)
    done
    failed=()
    for i in "${!ends_run[@]}"; do
        read -r python jax <<<"${ends_run[$i]}"
        status=0
        wait "${pids[$i]}" || status=$?
        echo "== The suite on Python $python with the $jax JAX" >&2
        cat "$logs/$python.log"
        [ "$status" = 0 ] || failed+=("Python $python with the $jax JAX")
    done
    rm -r "$logs"
    if [ ${#failed[@]} -gt 0 ]; then
        printf 'FAILED: the suite on %s\n' "${failed[@]}" >&2
        exit 1
    fi
    exit 0
fi

# The core unless a test file or folder is named (or --all).
if [ "$whole" = 0 ]; then
    named=0
    for arg in ${args[@]+"${args[@]}"}; do
        [[ "$arg" != -* && -e "${arg%%::*}" ]] && named=1
    done
    [ "$named" = 1 ] || args=("${CORE[@]}" ${args[@]+"${args[@]}"})
fi

# shellcheck disable=SC1091
source "$here/_venv.sh" test
python -c 'import sys, jax; print(f"Python {sys.version.split()[0]}, jax {jax.__version__}")'
plugin=()
if [ "$leaks" = lift ]; then
    # tests/conftest.py keeps this (it sets JAX's checker on only by default).
    export JAX_CHECK_TRACER_LEAKS=0
else
    export JAX_CHECK_TRACER_LEAKS=1
fi
[ "$leaks" = jax ] || plugin=(--lift-leaks)
echo "leak checking: $leaks (JAX_CHECK_TRACER_LEAKS=$JAX_CHECK_TRACER_LEAKS${plugin[*]+, ${plugin[*]}})"
# Every fast path of lift also runs the full walk and raises on a difference.
export LIFT_VERIFY=1
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
python -m pytest ${plugin[@]+"${plugin[@]}"} ${args[@]+"${args[@]}"}
