#!/usr/bin/env bash
# optax's own test suite, as shipped in its wheel, run three times: plain, with
# every optimizer and schedule lifted, and lifted with init/update called through
# jax.jit. Fails on a test whose outcome differs from the plain run unless
# tests/peers/expected.toml explains it, and when the patch was not live.
# Default: the files that build optimizers; `--all` for every file. Other
# arguments go to tests/peers/run.py (`--help`).
set -euo pipefail
source "$(dirname "$0")/_venv.sh" peers
python tests/peers/run.py "$@"
