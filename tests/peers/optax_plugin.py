"""pytest plugin: optax's own tests with every optimizer and schedule lifted.

Loaded by `tests/peers/run.py` as `pytest -p optax_plugin` (with `tests/peers` on
`PYTHONPATH`) in a copy of the test files shipped in the optax wheel:

- `--peers-mode=plain`: optax untouched; only outcomes are recorded.
- `--peers-mode=lifted`: every optax function that builds a
  `GradientTransformation` or a schedule is replaced, under every name that any
  optax module binds it to, by one that returns `lift.lift(result)`. Optax's
  own code calls its constructors through those module names, so the parts of
  a `chain` or an `inject_hyperparams` are lifted too.
- `--peers-mode=jitted`: as `lifted`, and each lifted `init` and `update` is
  called through one `jax.jit`, the lifted function an ordinary pytree argument.

`--peers-report=PATH` writes, for every test, its outcome and how many lifted
objects it built (and, per test module, how many its import built), so the
runner can prove the patch was live.
"""

from __future__ import annotations

import functools
import importlib
import json
import pkgutil
import sys
import types
from collections.abc import Callable
from typing import Any

import pytest

MODES = ("plain", "lifted", "jitted")


class _Counts:
    """What the patched constructors did since the last reset."""

    def __init__(self) -> None:
        self.built = 0  # constructor results that are optimizers or schedules
        self.lifted = 0  # of those, results that came back lifted

    def reset(self) -> None:
        self.built = self.lifted = 0


COUNTS = _Counts()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("peers", "optax's tests with lifted optimizers")
    group.addoption("--peers-mode", choices=MODES, default="plain")
    group.addoption("--peers-report", default=None, metavar="PATH")


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


# One program per lifted function's treedef and argument structure: the lifted
# function is an argument like the arrays it is called with. Other arguments
# stay as the test gave them: Python scalars (`update(..., loss=1)` where the
# update asserts `loss == 1`), functions (a `value_fn`), strings are static, by
# identity when they are not hashable.
class _Static:
    def __init__(self, value: Any) -> None:
        self.value = value

    def __hash__(self) -> int:
        try:
            return hash((type(self.value), self.value))
        except TypeError:
            return id(self.value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Static):
            return NotImplemented
        if type(self.value) is not type(other.value):
            return False
        try:
            return bool(self.value == other.value)
        except Exception:
            return self.value is other.value


def _is_array(leaf: Any) -> bool:
    import jax
    import numpy as np

    return isinstance(leaf, jax.Array | np.ndarray | np.generic)


@functools.cache
def _apply_jit() -> Callable[..., Any]:
    import jax

    def apply(fn: Any, dynamic: list[Any], static: tuple[Any, ...]) -> Any:
        treedef, statics = static
        it = iter(dynamic)
        leaves = [next(it) if s is None else s.value for s in statics]
        args, kwargs = jax.tree.unflatten(treedef, leaves)
        return fn(*args, **kwargs)

    return jax.jit(apply, static_argnums=2)


def _jitted(fn: Any) -> Any:
    import jax

    import lift

    def call(*args: Any, **kwargs: Any) -> Any:
        leaves, treedef = jax.tree.flatten((args, kwargs))
        dynamic = [leaf for leaf in leaves if _is_array(leaf)]
        statics = tuple(None if _is_array(leaf) else _Static(leaf) for leaf in leaves)
        return _apply_jit()(fn, dynamic, (treedef, statics))

    return lift.lift(call)


def _lifted(value: Any, mode: str) -> Any:
    import lift

    value = lift.lift(value)
    if mode == "jitted" and _is_optimizer(value):
        value = value._replace(init=_jitted(value.init), update=_jitted(value.update))
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


# --- hooks --------------------------------------------------------------------


class _Recorder:
    def __init__(self, mode: str, path: str | None, patched: int) -> None:
        self.mode = mode
        self.path = path
        self.patched = patched
        self.tests: dict[str, dict[str, Any]] = {}
        self.modules: dict[str, dict[str, int]] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Any:
        COUNTS.reset()
        yield
        entry = self.tests.setdefault(item.nodeid, {"outcome": "passed"})
        entry["built"] = COUNTS.built
        entry["lifted"] = COUNTS.lifted

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.tests.setdefault(report.nodeid, {"outcome": "passed"})
        if report.skipped and report.when in ("setup", "call"):
            entry["outcome"] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        elif report.failed:
            if entry["outcome"] != "failed":
                entry["outcome"] = "failed" if report.when == "call" else "error"
            entry.setdefault("message", _first_line(report))
        elif report.passed and report.when == "call" and hasattr(report, "wasxfail"):
            entry["outcome"] = "xpassed"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        # Optimizers built when a test module is imported (a table of them
        # that tests are parametrised over) count for that module.
        COUNTS.reset()
        yield
        if isinstance(collector, pytest.Module) and COUNTS.built:
            self.modules[collector.nodeid] = {
                "built": COUNTS.built,
                "lifted": COUNTS.lifted,
            }

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.tests[report.nodeid] = {
                "outcome": "error",
                "message": _first_line(report),
                "built": 0,
                "lifted": 0,
            }

    def pytest_sessionfinish(self) -> None:
        if self.path is not None:
            with open(self.path, "w") as f:
                json.dump(
                    {
                        "mode": self.mode,
                        "patched": self.patched,
                        "tests": self.tests,
                        "modules": self.modules,
                    },
                    f,
                    indent=0,
                    sort_keys=True,
                )

    def pytest_report_header(self) -> str:
        return f"peers: optax tests, mode {self.mode}, {self.patched} functions patched"


def _first_line(report: pytest.TestReport | pytest.CollectReport) -> str:
    text = str(report.longrepr or "")
    # The first lines of the error ("E   ..."), or the last line of the report.
    lines = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    lines = [line for line in lines if line][:3] or text.strip().splitlines()[-1:]
    return " | ".join(lines)[:300]


def pytest_configure(config: pytest.Config) -> None:
    mode = config.getoption("--peers-mode")
    # Before collection: test modules bind optax names when they are imported.
    patched = install(mode) if mode != "plain" else 0
    config.pluginmanager.register(
        _Recorder(mode, config.getoption("--peers-report"), patched), "peers-recorder"
    )
