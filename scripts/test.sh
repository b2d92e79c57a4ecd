#!/usr/bin/env bash
# Run the whole test suite the way CI does: under JAX's tracer-leak checking and
# with eight host devices. Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "$0")/_venv.sh" dev
export JAX_CHECK_TRACER_LEAKS=1
export XLA_FLAGS="--xla_force_host_platform_device_count=8"
python -m pytest "$@"
