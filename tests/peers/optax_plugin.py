"""pytest plugin: optax's own tests with every optimizer and schedule lifted.

Loaded by `tests/peers/run.py` in its `lifted` and `jitted` modes as `pytest -p
optax_plugin` (with `tests/peers` on `PYTHONPATH`), beside the `peers_report`
plugin, in a copy of the test files shipped in the optax wheel:

- `--peers-mode=lifted`: every optax function that builds a
  `GradientTransformation` or a schedule is replaced, under every name that any
  optax module binds it to, by one that returns `lift.lift(result)`. Optax's
  own code calls its constructors through those module names, so the parts of
  a `chain` or an `inject_hyperparams` are lifted too.
- `--peers-mode=jitted`: as `lifted`, and each lifted `init` and `update` is
  called through one `jax.jit`, the lifted function an ordinary pytree argument.

The patch counts, in `peers_report.COUNTS`, the optimizers and schedules it
built and how many came back lifted, so the runner can prove it was live.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
from peers_jit import jitted
from peers_report import COUNTS

MODES = ("lifted", "jitted")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("peers", "optax's tests with lifted optimizers")
    group.addoption("--peers-mode", choices=MODES, default="lifted")


# --- the patch ----------------------------------------------------------------


def _optax_modules() -> list[types.ModuleType]:
    import optax

    for info in pkgutil.walk_packages(optax.__path__, "optax."):
        if not info.name.endswith("_test"):
            # A module whose optional dependency is missing cannot be imported
            # by its tests either; it has nothing to patch.
            try:
                importlib.import_module(info.name)
            except ImportError:
                pass
    return [
        module
        for name, module in list(sys.modules.items())
        if (name == "optax" or name.startswith("optax."))
        and not name.endswith("_test")
        and isinstance(module, types.ModuleType)
    ]


def _return_kind(fn: types.FunctionType) -> str | None:
    """What `fn` is declared to return, as far as the patch cares.

    `"schedule"` (a `base.Schedule`), `"factory"` (a function returning
    optimizers, as `inject_hyperparams` does), `"maybe"` (an optimizer,
    possibly: annotated so, unannotated, or `Any`; checked on each result) or
    `None` (declared to return something else: not patched).
    """
    ret = fn.__annotations__.get("return", "<absent>")
    text = ret if isinstance(ret, str) else repr(ret)
    if "GradientTransformation" in text and text.startswith(
        ("collections.abc.Callable[...", "typing.Callable[...")
    ):
        return "factory"
    if "GradientTransformation" in text or "Aggregator" in text:
        return "maybe"
    from optax._src import base

    if ret == base.Schedule:
        return "schedule"
    if text in ("<absent>", "None", "typing.Any", "'Any'"):
        return "maybe"
    return None


def _is_optimizer(value: Any) -> bool:
    from optax._src import base

    return isinstance(value, base.GradientTransformation)


def _any_lifted(value: Any) -> bool:
    import lift

    if _is_optimizer(value):
        return lift.is_lifted(value.init) and lift.is_lifted(value.update)
    return lift.is_lifted(value)


def _lifted(value: Any, mode: str) -> Any:
    import lift

    value = lift.lift(value)
    if mode == "jitted" and _is_optimizer(value):
        value = value._replace(init=jitted(value.init), update=jitted(value.update))
    return value


def _patched(fn: types.FunctionType, kind: str, mode: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def constructor(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if kind == "factory" and callable(result):
            return _patched(result, "maybe", mode)
        if _is_optimizer(result) or (kind == "schedule" and callable(result)):
            COUNTS.built += 1
            result = _lifted(result, mode)
            COUNTS.lifted += _any_lifted(result)
        return result

    constructor.__peers_original__ = fn  # type: ignore[attr-defined]
    return constructor


def install(mode: str) -> int:
    """Patch optax for `mode`; return how many functions were replaced."""
    modules = _optax_modules()
    replaced: dict[types.FunctionType, Callable[..., Any]] = {}
    for module in modules:
        for name, value in list(vars(module).items()):
            if not isinstance(value, types.FunctionType):
                continue
            if not (value.__module__ or "").startswith("optax"):
                continue
            if value not in replaced:
                kind = _return_kind(value)
                if kind is None:
                    continue
                replaced[value] = _patched(value, kind, mode)
            setattr(module, name, replaced[value])
    return len(replaced)


def pytest_configure(config: pytest.Config) -> None:
    # Before collection: test modules bind optax names when they are imported.
    COUNTS.patched = install(config.getoption("--peers-mode"))
