#!/usr/bin/env bash
# The demo: a learning-rate sweep with plain optax and with lift, side by side.
# Extra arguments go to the demo (try --help).
set -euo pipefail
source "$(dirname "$0")/_venv.sh" examples
python examples/sweep.py "$@"
