#!/usr/bin/env bash
# Other libraries' own test suites, each run in several modes and compared with
# its plain run (tests/peers/harness.py). Fails on a test whose outcome differs
# from the plain run unless the suite's tests/peers/*expected.toml explains it,
# on a leak report in a leak-checking mode that the file does not explain, and
# when a mode was not live.
#
#   bash scripts/peers.sh [ARGS]              optax's tests (tests/peers/run.py):
#                                             plain, every optimizer lifted, and
#                                             lifted and jitted; default: the files
#                                             that build optimizers, `--all` for
#                                             every file, `--quick` without the
#                                             four heaviest
#   bash scripts/peers.sh --blackjax [ARGS]   blackjax's (from its sdist), plain
#                                             and with every top-level factory lifted
#   bash scripts/peers.sh --equinox [ARGS]    equinox's (its release tag's tests),
#   bash scripts/peers.sh --optimistix [ARGS] optimistix's: plain and under
#                                             `pytest --lift-leaks`
#   bash scripts/peers.sh --numpyro [ARGS]    numpyro's (from its sdist), the same
#   bash scripts/peers.sh --flax [ARGS]       flax's nnx tests (from its sdist),
#                                             the same
#   bash scripts/peers.sh --chex [ARGS]       chex's (shipped in its wheel), the same
#   bash scripts/peers.sh --haiku [ARGS]      dm-haiku's (shipped in its wheel),
#                                             the same
#   bash scripts/peers.sh --suite NAME [ARGS] the same, by name (optax, blackjax,
#                                             equinox, optimistix, numpyro, flax,
#                                             chex, haiku)
#
# Every runner takes --quick, --file PATH, --modes plain,..., --keep DIR,
# --reuse and pytest arguments after `--` (`--help` lists its modes).
set -euo pipefail
source "$(dirname "$0")/_venv.sh" peers
suite=optax
case "${1:-}" in
--blackjax | --equinox | --optimistix | --numpyro | --flax | --chex | --haiku | --optax)
    suite="${1#--}"
    shift
    ;;
--suite)
    suite="${2:?--suite needs a name: optax, blackjax, equinox, optimistix, numpyro, flax, chex or haiku}"
    shift 2
    ;;
esac
case "$suite" in
optax) python tests/peers/run.py "$@" ;;
blackjax | equinox | optimistix | numpyro | flax | chex | haiku) python "tests/peers/${suite}_run.py" "$@" ;;
*)
    echo "error: no peer suite $suite (optax, blackjax, equinox, optimistix, numpyro, flax, chex, haiku)" >&2
    exit 2
    ;;
esac
