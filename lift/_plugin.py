"""The pytest plugin: run each test inside `lift.checking_leaks()`.

Registered through the `pytest11` entry point and off unless asked for, with
`pytest --lift-leaks` or `lift_leaks = true` in the ini file. A leak fails the
test with the `LeakError` text; `@pytest.mark.lift_allow_leaks` exempts a test.
This module imports neither JAX nor the rest of `lift` until it is switched on,
so installing the library costs nothing to test suites that do not use it.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

__all__ = ["MARKER"]

MARKER = "lift_allow_leaks"
_ENABLED = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lift", "leaked-tracer checks (lift)")
    group.addoption(
        "--lift-leaks",
        action="store_true",
        default=None,
        help="run each test inside lift.checking_leaks(): a leaked tracer fails it",
    )
    parser.addini(
        "lift_leaks",
        type="bool",
        default=False,
        help="run each test inside lift.checking_leaks() (as --lift-leaks)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}: do not check this test for leaked tracers (lift --lift-leaks)",
    )
    option = config.getoption("lift_leaks")
    enabled = bool(config.getini("lift_leaks")) if option is None else bool(option)
    config.stash[_ENABLED] = enabled


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    __tracebackhide__ = True
    if not item.config.stash.get(_ENABLED, False) or item.get_closest_marker(MARKER):
        return (yield)
    from ._checking import checking_leaks
    from ._leaks import check_leaks

    with checking_leaks():
        result = yield
    # JAX's checker sees only traces exiting inside the test, and only when the
    # test leaves it on: scan what the test function names, too.
    check_leaks(getattr(item, "obj", None))
    return result
