#!/usr/bin/env bash
# Run the test suite the way CI does: under JAX's tracer-leak checking and with
# eight host devices. Needs only the `test` extra (CI's linters and docs build live
# in .ci/run). The whole suite takes about 17 minutes on 2 cores.
#
#   bash scripts/test.sh            # everything
#   bash scripts/test.sh --quick    # the core in about a minute: capture, transforms,
#                                   # lift.jit, closure conversion, leak checking
#
# Other arguments go to pytest (`bash scripts/test.sh --quick -x`,
# `bash scripts/test.sh tests/test_jit.py -k donation`).
set -euo pipefail
source "$(dirname "$0")/_venv.sh" test
QUICK=(
    tests/test_capture.py
    tests/test_soundness.py
    tests/test_transforms.py
    tests/test_replay.py
    tests/test_diff.py
    tests/test_jit.py
    tests/test_convert.py
    tests/test_leaks.py
    tests/test_checking.py
    tests/test_errors_messages.py
)
args=()
for arg in "$@"; do
    if [ "$arg" = "--quick" ]; then
        args=("${QUICK[@]}" ${args[@]+"${args[@]}"})
    else
        args+=("$arg")
    fi
done
export JAX_CHECK_TRACER_LEAKS=1
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
python -m pytest ${args[@]+"${args[@]}"}
