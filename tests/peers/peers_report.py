"""pytest plugin: each test's outcome, for the peer-suite harness to compare.

Loaded by `tests/peers/harness.py` in every mode, as `pytest -p peers_report
--peers-report=PATH` (with `tests/peers` on `PYTHONPATH`). It writes, for every
test, its outcome (passed, failed, error, skipped, xfailed, xpassed), the first
lines of its error, whether that error is a leak report (lift's `LeakError`,
JAX's `Leaked trace`), and what a suite's patch counted while it ran: how many
objects its patched constructors built and how many came back lifted (and, per
test module, how many its import built). A suite's patch plugin (optax_plugin,
blackjax_plugin) adds to `COUNTS`; without one they stay 0.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

# lift's report (`LeakError`, its "escaped the transform" text) and JAX's own
# checker's ("Leaked trace", "Leaked level").
LEAK = re.compile(r"LeakError|escaped the transform|Leaked trace|Leaked level")


class _Counts:
    """What a suite's patched constructors did since the last reset."""

    def __init__(self) -> None:
        self.patched = 0  # functions the patch replaced (set once, at configure)
        self.built = 0  # constructor results the patch lifts
        self.lifted = 0  # of those, results that came back lifted

    def reset(self) -> None:
        self.built = self.lifted = 0


COUNTS = _Counts()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("peers", "outcomes for the peer-suite harness")
    group.addoption("--peers-report", default=None, metavar="PATH")


def _message(report: pytest.TestReport | pytest.CollectReport) -> tuple[str, bool]:
    """The first lines of the error ("E   ..."), or the report's last line; and
    whether the error is a leak report."""
    text = str(report.longrepr or "")
    lines = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    lines = [line for line in lines if line][:3] or text.strip().splitlines()[-1:]
    return " | ".join(lines)[:300], bool(LEAK.search(text))


class _Recorder:
    def __init__(self, path: str | None) -> None:
        self.path = path
        self.tests: dict[str, dict[str, Any]] = {}
        self.modules: dict[str, dict[str, int]] = {}

    def _entry(self, nodeid: str) -> dict[str, Any]:
        return self.tests.setdefault(nodeid, {"outcome": "passed"})

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Any:
        COUNTS.reset()
        yield
        entry = self._entry(item.nodeid)
        entry["built"] = COUNTS.built
        entry["lifted"] = COUNTS.lifted

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self._entry(report.nodeid)
        if report.skipped and report.when in ("setup", "call"):
            entry["outcome"] = "xfailed" if hasattr(report, "wasxfail") else "skipped"
        elif report.failed:
            if entry["outcome"] not in ("failed", "error"):
                entry["outcome"] = "failed" if report.when == "call" else "error"
            message, leak = _message(report)
            entry.setdefault("message", message)
            if leak:
                entry["leak"] = True
        elif report.passed and report.when == "call" and hasattr(report, "wasxfail"):
            entry["outcome"] = "xpassed"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Any:
        # Objects built when a test module is imported (a table of optimizers
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
            message, leak = _message(report)
            self.tests[report.nodeid] = {
                "outcome": "error",
                "message": message,
                "built": 0,
                "lifted": 0,
            } | ({"leak": True} if leak else {})

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.path is None:
            return
        config = session.config
        lift_leaks = bool(config.getoption("lift_leaks", default=False))
        with open(self.path, "w") as f:
            json.dump(
                {
                    "patched": COUNTS.patched,
                    "lift_leaks": lift_leaks,
                    "lift_leaks_mode": config.getoption("lift_leaks_mode", None)
                    if lift_leaks
                    else None,
                    "tests": self.tests,
                    "modules": self.modules,
                },
                f,
                indent=0,
                sort_keys=True,
            )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(
        _Recorder(config.getoption("--peers-report")), "peers-recorder"
    )
