"""The leak checker in a real CI: reports that never crash and always speak
lift (a key whose `repr` raises, `unittest.TestCase` tests and doctests in
every mode), scans that never run the user's code, holders every walk opens,
and the code under test recognised however it is installed. Each leak has a
clean twin."""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import jax
import pytest
from helpers import plugin_args
from shared_runs import DEFAULT, DEFAULT_JAX_ON, EXHAUSTIVE, JAX_CHECKER, SharedRun

import lift

pytestmark = pytest.mark.lift_allow_leaks

# Every way the plugin runs: its default mode (JAX's checker off), its
# exhaustive mode, and its default mode with JAX's checker on in the run (each
# a pytest run in a subprocess shared with the plugin's other tests run so).
RUNS = [
    pytest.param(DEFAULT, id="default"),
    pytest.param(EXHAUSTIVE, id="exhaustive"),
    pytest.param(DEFAULT_JAX_ON, id="jax-checker-on"),
]


def _escaped() -> Any:
    """A tracer whose `jit` has exited."""
    box: list[Any] = []
    with jax.check_tracer_leaks(False):
        jax.jit(lambda x: box.append(x) or x)(1.0)
    return box[0]


class _NoRepr:
    def __repr__(self) -> str:
        raise AttributeError("no repr")


def test_a_key_whose_repr_raises_is_named_by_type_and_id() -> None:
    key = _NoRepr()
    (leak,) = lift.find_leaks({key: _escaped()})
    assert leak.path == f"roots[0][<{__name__}._NoRepr object at {id(key):#x}>]"


def test_a_key_whose_repr_raises_twin_holds_nothing() -> None:
    assert lift.find_leaks({_NoRepr(): 1.0}) == []


REPORTS = """
import unittest
import jax

STASH = []
REG = {}
KEPT = {}

class Key:
    def __repr__(self):
        raise AttributeError("no repr")

class T(unittest.TestCase):
    def test_leaky(self):
        jax.jit(lambda x: STASH.append(x) or x)(1.0)

    def test_clean(self):
        jax.jit(lambda x: KEPT.setdefault("shape", x.shape) and x)(1.0)

def test_bad_key():
    jax.jit(lambda x: REG.__setitem__(Key(), x) or x)(1.0)

def test_bad_key_clean():
    jax.jit(lambda x: KEPT.__setitem__(Key(), x.dtype) or x)(1.0)

def test_after():
    assert len(REG) == 1
"""


for _run in (DEFAULT, EXHAUSTIVE, DEFAULT_JAX_ON):
    _run.add("ci", {"test_reports.py": REPORTS})


@pytest.mark.parametrize("shared", RUNS)
def test_reports_never_crash_and_speak_lift(
    tmp_path_factory: pytest.TempPathFactory, shared: SharedRun
) -> None:
    run = shared(tmp_path_factory)
    run.assert_outcomes("test_reports.py", passed=3, failed=2)
    run.lines("test_reports.py").fnmatch_lines_random(
        [
            "*T::test_leaky FAILED*",
            "*T::test_clean PASSED*",
            "*test_bad_key FAILED*",
            "*test_bad_key_clean PASSED*",
            "*test_after PASSED*",
            "*STASH[[]0[]]: float32[[][]] from jit(<lambda>)*",
            "*REG[[]<test_reports.Key object at 0x*>[]]: float32[[][]] from jit*",
        ]
    )
    out = run.text("test_reports.py")
    assert "Leaked trace" not in out
    assert "no repr" not in out
    # One report per leaky test, counted on pytest's `E` lines: the short
    # summary repeats the message's first line too, whole or cut to the
    # terminal's width (which CI sets, and a laptop does not).
    reports = [
        line
        for line in out.splitlines()
        if line.startswith("E ")
        and line.endswith("1 tracer escaped the transform that created it:")
    ]
    assert len(reports) == 2


DOCTESTS = '''
STASH = []


def leaky(x):
    """Stores its tracer.

    >>> import jax
    >>> _ = jax.jit(leaky)(1.0)
    >>> len(STASH)
    1
    """
    STASH.append(x)
    return x * 2


def clean():
    """Stores a shape.

    >>> import jax
    >>> shapes = []
    >>> _ = jax.jit(lambda x: shapes.append(x.shape) or x)(1.0)
    >>> shapes
    [()]
    """


def kept_by_the_example():
    """Its example keeps the tracer.

    >>> import jax
    >>> seen = []
    >>> _ = jax.jit(lambda x: seen.append(x) or x)(1.0)
    >>> len(seen)
    1
    """
'''

# Each way the plugin runs, with `--doctest-modules`, over the module above.
DOCTEST_RUNS = []
for _run in (DEFAULT, EXHAUSTIVE, DEFAULT_JAX_ON):
    _doctests = SharedRun("--doctest-modules", *_run.args, jax_checker=_run.jax_checker)
    _doctests.add("doctests", {"doctest_leaks.py": DOCTESTS})
    DOCTEST_RUNS.append(_doctests)


@pytest.mark.parametrize(
    "shared", DOCTEST_RUNS, ids=["default", "exhaustive", "jax-checker-on"]
)
def test_a_doctests_leak_is_its_leak_error_alone(
    tmp_path_factory: pytest.TempPathFactory, shared: SharedRun
) -> None:
    # The doctest's runner catches JAX's error itself: the report is lift's
    # anyway, first, with no source of pytest's or the plugin's.
    run = shared(tmp_path_factory)
    run.assert_outcomes("doctest_leaks.py", passed=1, failed=2)
    text = run.failures("doctest_leaks.py") or ""
    assert text.startswith("lift.LeakError: 1 tracer escaped the transform"), text
    run.lines("doctest_leaks.py").fnmatch_lines(
        [
            "*doctest_leaks.kept_by_the_example FAILED*",
            "*doctest_leaks.leaky FAILED*",
        ]
    )
    # Each named by its variable: the module's, and the one the example bound.
    run.lines("doctest_leaks.py").fnmatch_lines(
        ["*seen[[]0[]]: float32[[][]] from jit(<lambda>)*"]
    )
    run.lines("doctest_leaks.py").fnmatch_lines(
        ["*STASH[[]0[]]: float32[[][]] from jit(leaky)*"]
    )
    assert "Leaked trace" not in text
    assert "plugin.py" not in text


class _Config:
    """A config tree that makes a child for any attribute asked for (and keeps
    it), callable like a proxy: reading `__wrapped__` through `getattr` would
    grow it without end."""

    def __call__(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name != "__wrapped__":
            raise AttributeError(name)
        child = _Config()
        object.__setattr__(self, name, child)
        return child


def _tree(value: Any) -> _Config:
    root = _Config()
    object.__setattr__(root, "params", value)
    object.__setattr__(root, "optim", _Config())
    return root


def _names(config: _Config) -> dict[str, Any]:
    return {
        k: _names(v) if type(v) is _Config else None for k, v in vars(config).items()
    }


def test_scans_never_run_an_objects_code() -> None:
    config = _tree(_escaped())
    before = _names(config)
    (leak,) = lift.find_leaks(config)
    assert leak.path == "roots[0].params"
    with pytest.raises(lift.LeakError, match=r"roots\[0\]\[0\]\.params: float32"):
        lift.check_leaks([config])
    assert _names(config) == before  # nothing made, nothing attached


def test_scans_never_run_an_objects_code_twin() -> None:
    config = _tree(1.0)
    before = _names(config)
    found = lift.find_leaks(config)
    assert found == [] and found.unopened == ()
    assert _names(config) == before


def test_the_frame_look_never_runs_an_objects_code() -> None:
    # The default mode's look at the frames as a trace exits opens what it
    # does not know itself through the scan's own opening of it.
    from lift._leaks.frames import FrameLook

    config = _tree(1.0)
    before = _names(config)
    for local in (config, _tree_holder(config)):
        FrameLook()(lift._compat.live_traces(), [("local", local)], 1_000, set())
    assert _names(config) == before


def test_the_frame_look_passes_an_object_whose_attributes_raise() -> None:
    # An object whose every attribute raises (`__class__` too, which
    # `isinstance` reads) held by a local: the look at a trace's exit finds
    # nothing in it and raises nothing into the user's `jit` call.
    class Hostile:
        def __getattribute__(self, name: str) -> Any:
            raise RuntimeError(f"no attribute {name} for you")

    from lift._leaks.frames import FrameLook

    found, _ = FrameLook()(
        lift._compat.live_traces(), [("hostile", Hostile())], 1_000, set()
    )
    assert found == []


def _tree_holder(config: _Config) -> Any:
    def holder() -> _Config:
        return config

    return holder


# `defaultdict`'s factory is a pytree's static data to capture (a case of its
# own there); to the leak scan, a holder like the others in `helpers.STORES`.
def test_a_defaultdict_factory_is_opened() -> None:
    tracer = _escaped()
    (leak,) = lift.find_leaks(collections.defaultdict(lambda: tracer))
    assert leak.path == "roots[0].default_factory.captures['tracer']"
    assert leak.variable == "tracer"


def test_a_defaultdict_factory_is_opened_twin() -> None:
    value = 1.0
    found = lift.find_leaks(collections.defaultdict(lambda: value))
    assert found == [] and found.unopened == ()


# Holders that the default mode opened as plain objects, or not at all: each
# test keeps the tracer (`x`) in one, and its twin keeps a shape.
HOLDERS = """
import asyncio, functools, weakref
import jax

class History(list):
    pass

class Target:
    pass

TARGET = Target()
CALLBACKS = []
FUTURES = []
HOLD = {}

def _future(value):
    loop = asyncio.new_event_loop()
    loop.close()
    future = asyncio.Future(loop=loop)
    future.set_result(value)
    return future

def test_lru_cleared_{kind}():
    @functools.lru_cache(maxsize=1)
    def make(k):
        return HOLD.get(k)
    def step(x):
        HOLD[1] = {kept}
        make(1)
        HOLD.clear()
        return x
    jax.jit(step)(1.0)
    make.cache_clear()

def test_lru_evicted_{kind}():
    @functools.lru_cache(maxsize=1)
    def make(k):
        return HOLD.get(k)
    def step(x):
        HOLD[1] = {kept}
        make(1)
        HOLD.clear()
        return x
    jax.jit(step)(1.0)
    make(2)

def test_list_subclass_attribute_{kind}():
    history = History()
    def step(x):
        history.best = {kept}
        return x
    jax.jit(step)(1.0)
    del history.best

def test_weakref_callback_{kind}():
    def step(x):
        kept = {kept}
        CALLBACKS.append(weakref.ref(TARGET, lambda _: kept))
        return x
    jax.jit(step)(1.0)

def test_future_{kind}():
    def step(x):
        FUTURES.append(_future({kept}))
        return x
    jax.jit(step)(1.0)
"""


_HOLDER_FILES = (
    "test_holders_leaky.py",
    "test_holders_clean.py",
    "test_holders_static.py",
)


@pytest.mark.parametrize(
    "shared",
    [
        pytest.param(DEFAULT, id="default"),
        pytest.param(JAX_CHECKER, id="jax-checker-on"),
    ],
)
def test_every_holder_is_opened(
    tmp_path_factory: pytest.TempPathFactory, shared: SharedRun
) -> None:
    # One run each way for every holder, and for a user's object between JAX's
    # cache and a tracer (`STATIC_FIELD`: JAX's cache keeps the returned
    # treedef, whose static data is the test's closure over the tracer: the
    # test's holding, which JAX's checker fails, never excused as a cache's).
    # Each way: the plugin's default mode, and JAX's checker without it.
    run = shared(tmp_path_factory)
    run.assert_outcomes("test_holders_leaky.py", failed=5)
    run.assert_outcomes("test_holders_clean.py", passed=5)
    run.assert_outcomes("test_holders_static.py", passed=1, failed=1)
    out = "\n".join(run.text(file) for file in _HOLDER_FILES)
    result = pytest.LineMatcher(out.splitlines())
    result.fnmatch_lines_random(
        [f"*test_{name}_clean PASSED*" for name in _HOLDER_TESTS]
        + [f"*test_{name}_leaky FAILED*" for name in _HOLDER_TESTS]
        + ["*test_static_leak FAILED*", "*test_static_clean PASSED*"]
    )
    if shared is DEFAULT:
        assert "libraries' caches" not in out
        result.fnmatch_lines_random(
            [
                "*-> test_static_leak.<locals>.traced.<locals>.<lambda> (*), "
                "captured variable 'x': float32[[][]] from jit(traced)*",
                "*test_lru_cleared_leaky (*), local variable 'make' at "
                "make.<cache>[[]1[]]: float32[[][]] from jit(step)*",
                "*test_lru_evicted_leaky (*), local variable 'make' at "
                "make.<cache>[[]1[]]: float32[[][]] from jit(step)*",
                "*local variable 'history' at history.best: float32[[][]]*",
                "*CALLBACKS[[]0[]].__callback__ -> *captured variable 'kept'*",
                "*FUTURES[[]0[]]._result: float32[[][]] from jit(step)*",
            ]
        )
        # Only the static field's holder is JAX's (the treedef it keeps): each
        # other holder is named.
        unseen = [x for x in result.lines if "held by no variable" in x]
        assert all("test_static_leak" in x for x in unseen), unseen


def _holders(kind: str, kept: str) -> str:
    return HOLDERS.replace("{kind}", kind).replace("{kept}", kept)


_HOLDER_TESTS = (
    "lru_cleared",
    "lru_evicted",
    "list_subclass_attribute",
    "weakref_callback",
    "future",
)


# The code under test is the user's however it is installed: a project whose
# own `lru_cache` keeps a tracer, and whose own function keeps one in a local
# while its trace exits; with twins keeping none. In a monorepo the second
# function is a sibling first-party library's, which the project re-exports.
CACHED = """
import functools

import jax

_CURRENT = []


@functools.lru_cache(maxsize=None)
def table(n):
    return _CURRENT[0] * n if _CURRENT else n


def cached_step(x, leak):
    def traced(x):
        if leak:
            _CURRENT[:] = [x]
        y = table(2 if leak else 3)
        _CURRENT.clear()
        return x + y

    return jax.jit(traced)(x)
"""

LOCAL = """
def local_step(x, leak):
    seen = []

    def traced(x):
        seen.append(x if leak else x.shape)
        return x * 2

    return jax.jit(traced)(x)
"""

PROJECT = CACHED + LOCAL

PROJECT_TESTS = """
import mypkg

def test_cached_leak():
    mypkg.cached_step(1.0, True)

def test_cached_clean():
    mypkg.cached_step(1.0, False)

def test_local_leak():
    mypkg.local_step(1.0, True)

def test_local_clean():
    mypkg.local_step(1.0, False)
"""


def _venv(root: Path) -> Path:
    """A virtual environment of its own (its `site-packages` where an
    installer puts a project), seeing this one's packages on `PYTHONPATH`: the
    libraries are outside its `site-packages` too."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root)], check=True
    )
    return root


def _site_packages(venv: Path) -> Path:
    (site,) = venv.glob("lib/python3*/site-packages")
    return site


# A monorepo's root conftest puts every project's `src` on `sys.path`.
MONOREPO_CONFTEST = """
import pathlib
import sys

for src in sorted(pathlib.Path(__file__).parent.glob("*/*/src")):
    sys.path.insert(0, str(src))
"""


def _lay_out(install: str, tmp_path: Path, site: Path) -> tuple[Path, list[str]]:
    """The project and its tests laid out as `install` leaves them: the folder
    pytest runs in and the `PYTHONPATH` it runs with (JAX, NumPy and lift
    outside the virtual environment's `site-packages` in every layout)."""
    source = tmp_path / "src"
    (source / "mypkg").mkdir(parents=True)
    (source / "mypkg" / "__init__.py").write_text(PROJECT)
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_project.py").write_text(PROJECT_TESTS)
    for stale in ("mypkg", "mypkg.pth"):
        shutil.rmtree(site / stale, ignore_errors=True)
        (site / stale).unlink(missing_ok=True)
    libraries = [Path(lift.__file__).parent.parent, *_our_site_packages()]
    path = list(map(str, libraries))
    if install == "editable":  # what `pip install -e .` leaves
        (site / "mypkg.pth").write_text(f"{source}\n")
    elif install == "installed":  # what `pip install .` or a wheel leaves
        shutil.copytree(source / "mypkg", site / "mypkg")
    elif install == "pythonpath":
        path.insert(0, str(source))
    elif install == "monorepo":
        # repo/projects/mypkg and repo/libs/mylib, found by the root conftest.
        repo = tmp_path / "repo"
        project = repo / "projects" / "mypkg"
        (project / "src" / "mypkg").mkdir(parents=True)
        (project / "src" / "mypkg" / "__init__.py").write_text(
            CACHED + "\nfrom mylib import local_step\n"
        )
        library = repo / "libs" / "mylib" / "src" / "mylib"
        library.mkdir(parents=True)
        (library / "__init__.py").write_text("import jax\n" + LOCAL)
        shutil.copytree(tests, project / "tests")
        (repo / "conftest.py").write_text(MONOREPO_CONFTEST)
        return repo, path
    else:
        # Bazel's runfiles: a tree of symlinks to the sources in `_main`, each
        # third-party repository's `site-packages` beside it.
        runfiles = tmp_path / "test_project.runfiles"
        main = runfiles / "_main"
        (main / "mypkg").mkdir(parents=True)
        (main / "tests").mkdir()
        (main / "mypkg" / "__init__.py").symlink_to(source / "mypkg" / "__init__.py")
        (main / "tests" / "test_project.py").symlink_to(tests / "test_project.py")
        path = [str(main)]
        for n, library in enumerate(libraries):
            pypi = runfiles / f"rules_python~~pip~pypi_{n}"
            pypi.mkdir()
            (pypi / "site-packages").symlink_to(library, target_is_directory=True)
            path.append(str(pypi / "site-packages"))
        return main, path
    return tmp_path, path


INSTALLS = ("editable", "installed", "pythonpath", "monorepo", "runfiles")


@pytest.fixture(scope="module")
def installs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    """Each layout's `pytest --lift-leaks -v` run (its stdout and stderr), the
    five side by side, each in a virtual environment of its own."""
    running = {}
    for install in INSTALLS:
        tmp_path = tmp_path_factory.mktemp(install)
        venv = _venv(tmp_path_factory.mktemp(f"{install}-venv"))
        cwd, path = _lay_out(install, tmp_path, _site_packages(venv))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
        env["JAX_CHECK_TRACER_LEAKS"] = "0"
        out, err = tmp_path / "stdout", tmp_path / "stderr"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = subprocess.Popen(
                [
                    *(str(venv / "bin" / "python"), "-m", "pytest", *plugin_args()),
                    *("--lift-leaks", "-v", "-p", "no:cacheprovider"),
                ],
                cwd=cwd,
                env=env,
                stdout=stdout,
                stderr=stderr,
            )
        running[install] = (process, out, err)
    for process, _, _ in running.values():
        process.wait(timeout=600)
    return {
        k: (out.read_text(), err.read_text()) for k, (_, out, err) in running.items()
    }


@pytest.mark.parametrize("install", INSTALLS)
def test_the_project_is_the_users_however_installed(
    installs: dict[str, tuple[str, str]], install: str
) -> None:
    out, err = installs[install]
    for line in (
        "test_cached_leak FAILED",
        "test_cached_clean PASSED",
        "test_local_leak FAILED",
        "test_local_clean PASSED",
    ):
        assert line in out, out + err
    assert re.search(r"table\.<cache>\[.*\]: float32\[\] from jit\(traced\)", out), out
    assert re.search(r"local_step \(.*\), local variable 'seen'", out), out
    assert "libraries' caches" not in out


def _our_site_packages() -> list[Path]:
    """Where this process finds its libraries (JAX, pytest, lift's entry point):
    every folder on `sys.path` but the standard library's, a `site-packages`
    or a `PYTHONPATH` entry alike."""
    stdlib = {
        Path(sysconfig.get_paths()[key]).resolve() for key in ("stdlib", "platstdlib")
    }
    return [
        Path(p)
        for p in sys.path
        if p
        and Path(p).is_dir()
        and Path(p).resolve() not in stdlib
        and Path(p).name != "lib-dynload"
    ]


STATIC_FIELD = """
import jax
import equinox as eqx


class M(eqx.Module):
    f: object = eqx.field(static=True)


def test_static_leak():
    def traced(x):
        return M(lambda: x)
    jax.jit(traced)(1.0)


def test_static_clean():
    def traced(x):
        shape = x.shape
        return M(lambda: shape)
    jax.jit(traced)(1.0)
"""

for _run in (DEFAULT, JAX_CHECKER):
    _run.add(
        "ci",
        {
            "test_holders_leaky.py": _holders("leaky", "x"),
            "test_holders_clean.py": _holders("clean", "x.shape"),
            "test_holders_static.py": STATIC_FIELD,
        },
    )
