"""pytest plugin: blackjax's own tests with every top-level factory lifted.

Loaded by `tests/peers/blackjax_run.py` as `pytest -p blackjax_plugin` (with
`tests/peers` on `PYTHONPATH`) in blackjax's source tree (its tests ship in the
sdist, not the wheel):

- `--peers-mode=plain`: blackjax untouched; only outcomes are recorded.
- `--peers-mode=lifted`: every factory that `blackjax` exposes at top level
  (`blackjax.hmc`, `blackjax.nuts`, `blackjax.window_adaptation`, ...: the
  sampling, variational and adaptation APIs) returns `lift.lift(result)`
  whenever its result is a NamedTuple holding functions (a `SamplingAlgorithm`,
  a `VIAlgorithm`, an `AdaptationAlgorithm`). Tests that build kernels through
  `blackjax.<name>` get lifted kernels; tests that call a module's
  `as_top_level_api` directly are run as they are.

`--peers-report=PATH` writes, for every test, its outcome and how many
NamedTuples of functions the factories built and how many came back lifted, so
the runner can prove the patch was live.
"""

from __future__ import annotations

import functools
import json
import types
from collections.abc import Callable
from typing import Any

import pytest

MODES = ("plain", "lifted")


class _Counts:
    def __init__(self) -> None:
        self.built = 0  # factory results that are NamedTuples of functions
        self.lifted = 0  # of those, results that came back lifted

    def reset(self) -> None:
        self.built = self.lifted = 0


COUNTS = _Counts()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("peers", "blackjax's tests with lifted kernels")
    group.addoption("--peers-mode", choices=MODES, default="plain")
    group.addoption("--peers-report", default=None, metavar="PATH")


def _holds_functions(value: Any) -> bool:
    """A NamedTuple with a function among its fields."""
    return (
        isinstance(value, tuple)
        and hasattr(type(value), "_fields")
        and any(callable(v) and not isinstance(v, type) for v in value)
    )


def _patched(fn: Callable[..., Any]) -> Callable[..., Any]:
    import lift

    @functools.wraps(fn)
    def factory(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if _holds_functions(result):
            COUNTS.built += 1
            result = lift.lift(result)
            COUNTS.lifted += not any(isinstance(v, types.FunctionType) for v in result)
        return result

    factory.__peers_original__ = fn  # type: ignore[attr-defined]
    return factory


def install() -> int:
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
            value.differentiable = _patched(value.differentiable)
            done.add(id(value))
        elif isinstance(value, types.FunctionType | functools.partial) and (
            getattr(value, "__module__", "") or ""
        ).startswith("blackjax"):
            setattr(blackjax, name, _patched(value))
            done.add(id(value))
    return len(done)


class _Recorder:
    def __init__(self, mode: str, path: str | None, patched: int) -> None:
        self.mode = mode
        self.path = path
        self.patched = patched
        self.tests: dict[str, dict[str, Any]] = {}

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
                    {"mode": self.mode, "patched": self.patched, "tests": self.tests},
                    f,
                    indent=0,
                    sort_keys=True,
                )

    def pytest_report_header(self) -> str:
        return (
            f"peers: blackjax tests, mode {self.mode}, {self.patched} factories patched"
        )


def _first_line(report: pytest.TestReport | pytest.CollectReport) -> str:
    text = str(report.longrepr or "")
    lines = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    lines = [line for line in lines if line][:3] or text.strip().splitlines()[-1:]
    return " | ".join(lines)[:300]


def pytest_configure(config: pytest.Config) -> None:
    mode = config.getoption("--peers-mode")
    # Before collection: test modules read `blackjax.<name>` when they run, and
    # some bind factories at import.
    patched = install() if mode != "plain" else 0
    config.pluginmanager.register(
        _Recorder(mode, config.getoption("--peers-report"), patched), "peers-recorder"
    )
