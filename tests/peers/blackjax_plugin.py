"""pytest plugin: blackjax's own tests with every top-level factory lifted.

Loaded by `tests/peers/blackjax_run.py` in its `lifted` and `jitted` modes as `pytest -p
blackjax_plugin` (with `tests/peers` on `PYTHONPATH`), beside the `peers_report`
plugin, in blackjax's source tree (its tests ship in the sdist, not the wheel):

- `--peers-mode=lifted`: every factory that `blackjax` exposes at top level
  (`blackjax.hmc`, `blackjax.nuts`, `blackjax.window_adaptation`, ...: the
  sampling, variational and adaptation APIs) returns `lift.lift(result)`
  whenever its result is a NamedTuple holding functions (a `SamplingAlgorithm`,
  a `VIAlgorithm`, an `AdaptationAlgorithm`). Tests that build kernels through
  `blackjax.<name>` get lifted kernels; tests that call a module's
  `as_top_level_api` directly are run as they are.
- `--peers-mode=jitted`: as `lifted`, and the lifted result's `init` and
  `step` (a `SamplingAlgorithm`'s, a `VIAlgorithm`'s) are called through one
  `jax.jit`, the lifted function an ordinary pytree argument (`peers_jit`).
  An `AdaptationAlgorithm`'s `run` (a Python loop over steps in some
  adaptations) is called as it is.

The patch counts, in `peers_report.COUNTS`, the NamedTuples of functions the
factories built and how many came back lifted, so the runner can prove it was
live.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import pytest
from peers_jit import jitted
from peers_report import COUNTS

MODES = ("lifted", "jitted")
# The fields of a lifted result that the jitted mode calls through `jax.jit`.
JITTED_FIELDS = ("init", "step")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("peers", "blackjax's tests with lifted kernels")
    group.addoption("--peers-mode", choices=MODES, default="lifted")


def _holds_functions(value: Any) -> bool:
    """A NamedTuple with a function among its fields."""
    return (
        isinstance(value, tuple)
        and hasattr(type(value), "_fields")
        and any(callable(v) and not isinstance(v, type) for v in value)
    )


def _patched(fn: Callable[..., Any], mode: str) -> Callable[..., Any]:
    import lift

    @functools.wraps(fn)
    def factory(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if _holds_functions(result):
            COUNTS.built += 1
            result = lift.lift(result)
            if mode == "jitted":
                result = result._replace(
                    **{
                        field: jitted(getattr(result, field))
                        for field in JITTED_FIELDS
                        if field in result._fields
                    }
                )
            COUNTS.lifted += not any(isinstance(v, types.FunctionType) for v in result)
        return result

    factory.__peers_original__ = fn  # type: ignore[attr-defined]
    return factory


def install(mode: str) -> int:
    """Patch blackjax's top-level factories; return how many were replaced."""
    import blackjax

    apis = tuple(
        getattr(blackjax, name)
        for name in (
            "GenerateSamplingAPI",
            "GenerateVariationalAPI",
            "GeneratePathfinderAPI",
        )
        if hasattr(blackjax, name)
    )
    done: set[int] = set()
    for name, value in list(vars(blackjax).items()):
        if name.startswith("_") or id(value) in done:
            continue
        if isinstance(value, apis):
            # `api(...)` calls `api.differentiable(...)`; its `init`,
            # `build_kernel` and the like stay as they are.
            value.differentiable = _patched(value.differentiable, mode)
            done.add(id(value))
        elif isinstance(value, types.FunctionType | functools.partial) and (
            getattr(value, "__module__", "") or ""
        ).startswith("blackjax"):
            setattr(blackjax, name, _patched(value, mode))
            done.add(id(value))
    return len(done)


def pytest_configure(config: pytest.Config) -> None:
    # Before collection: test modules read `blackjax.<name>` when they run, and
    # some bind factories at import.
    COUNTS.patched = install(config.getoption("--peers-mode"))
