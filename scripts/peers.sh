#!/usr/bin/env bash
# optax's own test suite, as shipped in its wheel, run three times: plain, with
# every optimizer and schedule lifted, and lifted with init/update called through
# jax.jit. Fails on a test whose outcome differs from the plain run unless
# tests/peers/expected.toml explains it, and when the patch was not live.
# Default: the files that build optimizers; `--all` for every file. Other
# arguments go to tests/peers/run.py (`--help`).
#
# `--blackjax` first runs blackjax's own tests instead (from its sdist), plain
# and with every top-level factory lifted; other arguments go to
# tests/peers/blackjax_run.py (`bash scripts/peers.sh --blackjax --quick`).
set -euo pipefail
source "$(dirname "$0")/_venv.sh" peers
if [ "${1:-}" = "--blackjax" ]; then
    shift
    python tests/peers/blackjax_run.py "$@"
    exit
fi
python tests/peers/run.py "$@"
