"""pytest runs in a subprocess that the plugin's tests share.

A test of the plugin writes a small test file and runs pytest on it in a
subprocess, which starts Python and imports JAX (2 to 5 s) before it checks
anything. Tests that run pytest the same way (the same options and the same
`JAX_CHECK_TRACER_LEAKS`) add their files to one of the runs below when their
module is imported, each in a folder of its own, and read their tests' outcomes
and reports from that run: one subprocess a way for the whole session. The
runs start side by side with the session (tests/conftest.py), and run beside
the tests before the ones that read them; a test that reads a run not started
starts it. Every test file's basename is its own (pytest imports them by
name), as is each helper module's.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import child_path, plugin_args

# Loaded in the run with `-p`: writes each phase's report of each test.
_RECORDER = """
import json
import pathlib

_OUT = pathlib.Path(__file__).with_name("reports.jsonl")


def _write(nodeid, when, outcome, text):
    with _OUT.open("a", encoding="utf-8") as f:
        f.write(json.dumps([nodeid, when, outcome, text]) + "\\n")


def pytest_runtest_logreport(report):
    _write(report.nodeid, report.when, report.outcome, report.longreprtext)


def pytest_collectreport(report):
    if report.failed:
        _write(report.nodeid, "collect", report.outcome, report.longreprtext)
"""


class Run:
    """What one pytest run did: each test's outcome per phase and the text of
    its failures, read per test file; and the terminal's output."""

    def __init__(self, records: list[list[str]], stdout: str, stderr: str) -> None:
        self.records = records
        self.stdout = stdout
        self.stderr = stderr

    def _of(self, file: str, only: tuple[str, ...] = ()) -> list[list[str]]:
        return [
            [_shown(nodeid), *rest]
            for nodeid, *rest in self.records
            if Path(nodeid.split("::")[0]).name == file
            and (not only or nodeid.split("::")[-1] in only)
        ]

    def outcomes(self, file: str, only: tuple[str, ...] = ()) -> dict[str, int]:
        """As pytest counts them (of the tests named `only`, or all): a test's
        call passed, failed or skipped; a failed setup or teardown is an error."""
        counts: collections.Counter[str] = collections.Counter()
        for _, when, outcome, _ in self._of(file, only):
            if when == "call" or outcome == "skipped":
                counts[outcome] += 1
            elif outcome == "failed":
                counts["errors"] += 1
        return dict(counts)

    def assert_outcomes(
        self, file: str, only: tuple[str, ...] = (), **expected: int
    ) -> None:
        want = {k: v for k, v in expected.items() if v}
        assert self.outcomes(file, only) == want, self.text(file) + self.stderr

    def text(self, file: str) -> str:
        """The file's part of the output, as a run of that file alone shows it
        with `-v`: a line per test (and per failed setup or teardown), each
        failure's heading and report, and the plugin's closing sections' lines
        about its tests."""
        records = self._of(file)
        lines = []
        for nodeid, when, outcome, _ in records:
            if when == "call":
                lines.append(f"{nodeid} {outcome.upper()}")
            elif outcome != "passed":
                word = "ERROR" if outcome == "failed" else "SKIPPED"
                lines.append(f"{nodeid} {word}")
        for nodeid, when, outcome, text in records:
            if outcome != "failed":
                continue
            name = nodeid.split("::", 1)[-1]
            heading = name if when == "call" else f"ERROR at {when} of {name}"
            lines += [f"_____ {heading} _____", text]
        section, shown = "", ""
        for line in self.stdout.splitlines():
            if line.startswith("="):
                section = line.strip("= ")
            elif section.startswith("lift --lift-leaks: "):
                path = line.split("::")[0]
                if "::" in line and Path(path).name == file:
                    if shown != section:
                        lines.append(f"===== {section} =====")
                        shown = section
                    lines.append(_shown(line))
        return "\n".join(lines)

    def failures(self, file: str) -> str | None:
        """The reports of the file's failures and errors (`None`: it has none)."""
        texts = [text for _, _, outcome, text in self._of(file) if outcome == "failed"]
        return "\n".join(texts) if texts else None

    def lines(self, file: str) -> pytest.LineMatcher:
        return pytest.LineMatcher(self.text(file).splitlines())


def _shown(nodeid: str) -> str:
    """A nodeid without its folder: as a run in that folder shows it."""
    path, sep, rest = nodeid.partition("::")
    return Path(path).name + sep + rest


class SharedRun:
    """A pytest run in a subprocess over the files that test modules add."""

    def __init__(self, *args: str, jax_checker: bool, ini: str = "") -> None:
        self.args = args
        self.jax_checker = jax_checker
        self.ini = ini  # the run's pytest.ini
        self.folders: dict[str, dict[str, str]] = {}
        self.root: Path | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.run: Run | None = None
        _RUNS.append(self)

    def add(self, folder: str, files: dict[str, str]) -> None:
        """Files (name: source, dedented) to run in `folder`; at import time,
        before the run starts."""
        assert self.root is None, "added after the run started"
        self.folders.setdefault(folder, {}).update(files)

    def __call__(self, tmp_path_factory: pytest.TempPathFactory) -> Run:
        """The run's outcomes, once it has ended (started now if not yet)."""
        if self.run is None:
            self.start(tmp_path_factory)
            assert self.process is not None and self.root is not None
            self.process.wait(timeout=900)
            self.run = _read(self.root)
        return self.run

    def start(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        if self.root is not None:
            return
        self.root = root = tmp_path_factory.mktemp("shared-run")
        names = [
            f for files in self.folders.values() for f in files if f != "conftest.py"
        ]
        assert len(names) == len(set(names)), f"a file name twice: {sorted(names)}"
        for folder, files in self.folders.items():
            for name, source in files.items():
                path = root / folder / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(textwrap.dedent(source).strip() + "\n")
        (root / "_recorder.py").write_text(_RECORDER)
        if self.ini:
            (root / "pytest.ini").write_text(self.ini)
        env: dict[str, Any] = {**os.environ, "COLUMNS": "250"}
        env["JAX_CHECK_TRACER_LEAKS"] = "1" if self.jax_checker else "0"
        env["PYTHONPATH"] = child_path(root)
        env.pop("PYTEST_ADDOPTS", None)
        with (root / "stdout").open("wb") as out, (root / "stderr").open("wb") as err:
            self.process = subprocess.Popen(
                [
                    *(sys.executable, "-m", "pytest", *plugin_args(), *self.args),
                    *("-p", "_recorder", "-p", "no:cacheprovider"),
                    *(f"--rootdir={root}", *sorted(self.folders)),
                ],
                cwd=root,
                env=env,
                stdout=out,
                stderr=err,
            )


def _read(root: Path) -> Run:
    reports = root / "reports.jsonl"
    text = reports.read_text() if reports.exists() else ""
    records = [json.loads(line) for line in text.splitlines()]
    return Run(records, (root / "stdout").read_text(), (root / "stderr").read_text())


_RUNS: list[SharedRun] = []


def start_all(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Start every run some test module added files to: they run side by side,
    and beside the tests before the ones that read them (on a second core the
    suite's own process leaves idle)."""
    for shared in _RUNS:
        if shared.folders:
            shared.start(tmp_path_factory)


def stop_all() -> None:
    """End the runs no test waited for (their tests deselected)."""
    for shared in _RUNS:
        if shared.process is not None and shared.process.poll() is None:
            shared.process.kill()
            shared.process.wait()


# JAX's checker on, the plugin loaded and not switched on.
JAX_CHECKER = SharedRun(jax_checker=True)
# The plugin's default mode with JAX's checker on in the run.
DEFAULT_JAX_ON = SharedRun("--lift-leaks", jax_checker=True)
# The plugin's default mode (JAX's checker off).
DEFAULT = SharedRun("--lift-leaks", jax_checker=False)
# The plugin's exhaustive mode.
EXHAUSTIVE = SharedRun(
    "--lift-leaks", "--lift-leaks-mode=exhaustive", jax_checker=False
)
