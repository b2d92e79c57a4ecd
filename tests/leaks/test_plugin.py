"""The pytest plugin, end to end: small test files run by pytest in a
subprocess. Those run the same way share one run (`shared_runs`), each test
reading its own file's outcomes and reports there."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
from shared_runs import (
    DEFAULT,
    DEFAULT_JAX_ON,
    EXHAUSTIVE,
    JAX_CHECKER,
    Run,
    SharedRun,
)

import lift._leaks.plugin
from lift import _compat

pytest_plugins = ("pytester",)

LEAKY = """
import jax
import pytest

STASH = []

def test_leaky():
    with jax.check_tracer_leaks(False):
        jax.jit(lambda x: STASH.append(x) or x)(1.0)

def test_leaky_jax_checks_on():
    def step(x):
        STASH.append(x)
        return x
    jax.jit(step)(1.0)

@pytest.mark.lift_allow_leaks
def test_allowed():
    with jax.check_tracer_leaks(False):
        jax.jit(lambda x: STASH.append(x) or x)(1.0)

def test_clean():
    assert jax.jit(lambda x: x * 2)(1.0) == 2.0
"""


def _plugin_args() -> list[str]:
    # Installed, the entry point loads the plugin; from a source tree, name it.
    installed = any(
        ep.value == "lift._leaks.plugin"
        for ep in importlib.metadata.entry_points(group="pytest11")
    )
    return [] if installed else ["-p", "lift._leaks.plugin"]


# Written for JAX's checker on (its report without the plugin, the plugin then
# inside `lift.checking_leaks()`), whatever this run's own checking.
JAX_CHECKER.add("plugin", {"test_leaky.py": LEAKY})
DEFAULT_JAX_ON.add("plugin", {"test_leaky.py": LEAKY})


@pytest.fixture(scope="module")
def jax_checker_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """JAX's checker on, the plugin loaded and not switched on."""
    return JAX_CHECKER(tmp_path_factory)


@pytest.fixture(scope="module")
def jax_on_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """`--lift-leaks` with JAX's checker on."""
    return DEFAULT_JAX_ON(tmp_path_factory)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """`--lift-leaks` (the default mode, JAX's checker off)."""
    return DEFAULT(tmp_path_factory)


@pytest.fixture(scope="module")
def exhaustive_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """`--lift-leaks --lift-leaks-mode=exhaustive`."""
    return EXHAUSTIVE(tmp_path_factory)


def test_off_by_default(jax_checker_run: Run) -> None:
    jax_checker_run.assert_outcomes("test_leaky.py", passed=3, failed=1)
    # Without the plugin, JAX's own checker reports the second test its way.
    jax_checker_run.lines("test_leaky.py").fnmatch_lines(["*Leaked trace*"])


def test_flag_fails_leaky_tests_with_the_leak_error(jax_on_run: Run) -> None:
    jax_on_run.assert_outcomes("test_leaky.py", passed=2, failed=2)
    jax_on_run.lines("test_leaky.py").fnmatch_lines(
        [
            "*lift.LeakError: 1 tracer escaped the transform that created it:",
            "*STASH[[]0[]]: float32[[][]] from jit(<lambda>)*",
            # STASH[0] escaped in the test before: this one is blamed for its own.
            "*lift.LeakError: 1 tracer escaped the transform that created it:",
            "*STASH[[]1[]]: float32[[][]] from jit(step), in global 'STASH' used by "
            "test_leaky_jax_checks_on.<locals>.step*",
        ]
    )
    assert "Leaked trace" not in jax_on_run.text("test_leaky.py")


INI_ON = SharedRun(jax_checker=True, ini="[pytest]\nlift_leaks = true\n")
INI_ON.add("plugin", {"test_leaky.py": LEAKY})


def test_ini_switches_it_on(tmp_path_factory: pytest.TempPathFactory) -> None:
    INI_ON(tmp_path_factory).assert_outcomes("test_leaky.py", passed=2, failed=2)


def test_marker_exempts_and_clean_tests_pass(jax_on_run: Run) -> None:
    jax_on_run.assert_outcomes(
        "test_leaky.py", only=("test_allowed", "test_clean"), passed=2
    )


def test_own_frames_are_hidden(jax_on_run: Run) -> None:
    out = jax_on_run.text("test_leaky.py")
    assert "test_leaky.py" in out
    # The checker's and the plugin's modules (lift/_leaks/checking.py and
    # plugin.py since lift's files moved into folders).
    assert "checking.py" not in out
    assert "plugin.py" not in out


def test_option_and_marker_are_documented(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(*_plugin_args(), "--help")
    result.stdout.fnmatch_lines(["*--lift-leaks*"])
    result = pytester.runpytest_subprocess(*_plugin_args(), "--markers")
    result.stdout.fnmatch_lines(["*lift_allow_leaks*"])


def test_plugin_module_imports_no_jax() -> None:
    # The plugin's own code imports JAX only once switched on; loaded from its
    # file alone, it leaves `jax` out of `sys.modules`.
    code = (
        "import importlib.util, sys\n"
        f"path = {lift._leaks.plugin.__file__!r}\n"
        "spec = importlib.util.spec_from_file_location('plugin', path)\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "assert 'jax' not in sys.modules, 'jax imported'\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent,
    )
    assert out.stdout.strip() == "ok"


def test_loading_the_plugin_does_not_import_jax(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_no_jax="""
import sys

def test_jax_not_imported():
    assert "jax" not in sys.modules
"""
    )
    result = pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


FIXTURES = """
import jax
import pytest

LEAKED = []
KEPT = []

@pytest.fixture
def leaky_setup():
    with jax.check_tracer_leaks(False):
        jax.jit(lambda x: LEAKED.append(x) or x)(1.0)
    return 1

@pytest.fixture
def leaky_teardown():
    yield 2
    with jax.check_tracer_leaks(False):
        jax.jit(lambda x: KEPT.append(x) or x)(2.0)

@pytest.fixture
def clean():
    yield jax.jit(lambda x: x * 2)(1.0)
    jax.jit(lambda x: x + 1)(1.0)

def test_uses_leaky_setup(leaky_setup):
    assert leaky_setup == 1

def test_uses_leaky_teardown(leaky_teardown):
    assert leaky_teardown == 2

def test_innocent_names_the_globals():
    assert len(LEAKED) == len(KEPT) == 1

def test_clean_fixture(clean):
    assert clean == 2.0
"""


JAX_CHECKER.add("plugin", {"test_fixtures.py": FIXTURES})
DEFAULT_JAX_ON.add("plugin", {"test_fixtures.py": FIXTURES})
DEFAULT.add("plugin", {"test_fixtures.py": FIXTURES})


def test_fixtures_count_as_part_of_their_test(
    default_run: Run, jax_on_run: Run
) -> None:
    # In the default mode, and with JAX's checker on in the run.
    for run in (default_run, jax_on_run):
        _fixtures_count(run)


def _fixtures_count(run: Run) -> None:
    # Setup's leak errors its test; teardown's errors its test after it passed;
    # the innocent test that later names both globals and the clean twin pass.
    run.assert_outcomes("test_fixtures.py", passed=3, errors=2)
    result = run.lines("test_fixtures.py")
    result.fnmatch_lines(
        [
            "*test_uses_leaky_setup ERROR*",
            "*test_uses_leaky_teardown PASSED*",
            "*test_uses_leaky_teardown ERROR*",
            "*test_innocent_names_the_globals PASSED*",
            "*test_clean_fixture PASSED*",
        ]
    )
    result.fnmatch_lines(
        [
            "*ERROR at setup of test_uses_leaky_setup*",
            "*LEAKED[[]0[]]: float32[[][]] from jit(<lambda>), in global 'LEAKED' "
            "used by leaky_setup (*",
            "*ERROR at teardown of test_uses_leaky_teardown*",
            "*KEPT[[]0[]]: float32[[][]] from jit(<lambda>)*",
        ]
    )


def test_fixture_twin_without_the_plugin_all_pass(jax_checker_run: Run) -> None:
    # JAX's checker passes them too.
    jax_checker_run.assert_outcomes("test_fixtures.py", passed=4)


HELPERS = """
import jax

CACHE = []

def run(x):
    return jax.jit(lambda y: CACHE.append(y) or y)(x)
"""

MODES = """
import jax
import leaky_helpers

STASH = []

def test_names_its_global():
    jax.jit(lambda x: STASH.append(x) or x)(1.0)

def test_leak_held_elsewhere():
    leaky_helpers.run(1.0)

def test_jax_checker_off():
    # JAX's own checker (a gc.collect() at every trace exit, some caches
    # bypassed) is what makes the exhaustive mode slow.
    assert not jax.config.jax_check_tracer_leaks, "JAX's checker is on"
"""


@pytest.fixture
def modes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    monkeypatch.setenv("JAX_CHECK_TRACER_LEAKS", "0")
    pytester.makepyfile(leaky_helpers=HELPERS, test_modes=MODES)
    return pytester


DEFAULT.add("plugin", {"leaky_helpers.py": HELPERS, "test_modes.py": MODES})
EXHAUSTIVE.add("plugin", {"leaky_helpers.py": HELPERS, "test_modes.py": MODES})


def test_fast_mode_is_the_default_and_leaves_jax_checker_off(default_run: Run) -> None:
    default_run.assert_outcomes("test_modes.py", passed=1, failed=2)
    default_run.lines("test_modes.py").fnmatch_lines(
        [
            "*test_names_its_global FAILED*",
            # Reached through the module the test names, and seen as a trace
            # that exited and stayed alive: found without JAX's checker.
            "*test_leak_held_elsewhere FAILED*",
            "*test_jax_checker_off PASSED*",
            "*STASH[[]0[]]: float32[[][]] from jit(<lambda>)*",
            "*leaky_helpers.CACHE[[]0[]]: float32[[][]] from jit(<lambda>), in "
            "global 'CACHE' used by run (*leaky_helpers.py:5)*",
        ]
    )


def test_exhaustive_mode_also_finds_leaks_held_elsewhere(
    exhaustive_run: Run,
) -> None:
    exhaustive_run.assert_outcomes("test_modes.py", passed=0, failed=3)
    exhaustive_run.lines("test_modes.py").fnmatch_lines(
        [
            "*CACHE[[]0[]]: float32[[][]] from jit(<lambda>)*",
            "*JAX's checker is on*",
        ]
    )


INI_EXHAUSTIVE = SharedRun(
    jax_checker=False, ini="[pytest]\nlift_leaks = true\nlift_leaks_mode = exhaustive\n"
)
INI_EXHAUSTIVE.add("plugin", {"leaky_helpers.py": HELPERS, "test_modes.py": MODES})


def test_mode_from_the_ini_and_bad_modes(
    modes: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    INI_EXHAUSTIVE(tmp_path_factory).assert_outcomes("test_modes.py", failed=3)
    result = modes.runpytest_subprocess(*_plugin_args(), "--lift-leaks-mode=slow")
    result.stderr.fnmatch_lines(["*invalid choice: 'slow'*"])


def test_a_bad_mode_in_the_ini_is_refused(pytester: pytest.Pytester) -> None:
    # Refused as pytest starts, before any test (and JAX): run in this process.
    pytester.makeini("[pytest]\nlift_leaks_mode = slow\n")
    result = pytester.runpytest_inprocess(*_plugin_args(), "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*lift_leaks_mode must be one of ('fast', 'exhaustive'): 'slow'*"]
    )


FAILING_UNITTEST = """
import unittest

class T(unittest.TestCase):
    def test_fails(self):
        self.assertEqual([1.0], [2.0])
"""


DEFAULT.add("plugin", {"test_failing_unittest.py": FAILING_UNITTEST})


def test_a_unittest_tests_own_failure_is_reported_as_it_is(default_run: Run) -> None:
    # Its leaking twin, `T::test_leaky` in test_leaks_ci.py, fails with lift's
    # report: the plugin reads a `unittest.TestCase` method's errors first.
    default_run.assert_outcomes("test_failing_unittest.py", failed=1)
    default_run.lines("test_failing_unittest.py").fnmatch_lines(
        ["*AssertionError: Lists differ: [[]1.0[]] != [[]2.0[]]*"]
    )
    assert "LeakError" not in default_run.text("test_failing_unittest.py")


UNOPENED = """
import jax

class Sealed:
    @property
    def __dict__(self):
        raise RuntimeError("sealed")

SEALED = Sealed()
STASH = []

def test_clean_names_a_sealed_object():
    assert SEALED is not None

def test_leaky_names_it_too():
    jax.jit(lambda x: STASH.append(x) or x)(1.0)
    assert SEALED is not None
"""


READABLE = UNOPENED.replace("    @property\n    def __dict__(self):\n", "").replace(
    '        raise RuntimeError("sealed")\n', "    pass\n"
)
DEFAULT.add("plugin", {"test_unopened.py": UNOPENED, "test_unopened_twin.py": READABLE})


def test_what_cannot_be_opened_is_named_and_fails_no_clean_test(
    default_run: Run,
) -> None:
    default_run.assert_outcomes("test_unopened.py", passed=1, failed=1)
    default_run.lines("test_unopened.py").fnmatch_lines(
        [
            "*test_clean_names_a_sealed_object PASSED*",
            "*test_leaky_names_it_too FAILED*",
            # In the failing test's report, after its leak.
            "*STASH[[]0[]]: float32[[][]] from jit(<lambda>)*",
            "*could not open SEALED.__dict__: NotRun: __dict__ is a property of "
            "Sealed, whose code a scan does not run",
        ]
    )
    # The passing test left no tracer alive: nothing was scanned, nothing
    # skipped.
    assert "holders not opened" not in default_run.text("test_unopened.py")


def test_what_cannot_be_opened_is_named_twin(default_run: Run) -> None:
    assert "property" not in READABLE
    default_run.assert_outcomes("test_unopened_twin.py", passed=1, failed=1)
    assert "could not open" not in default_run.text("test_unopened_twin.py")


ROOT_FIND = """
import jax
import jax.numpy as jnp
import optimistix as optx

SAVED = []

def cube_root(a):
    def fn(y, args):
        return y**3 - a
    solver = optx.Newton(rtol=1e-6, atol=1e-6)
    return optx.root_find(fn, solver, jnp.array(1.0), throw=False).value

def test_grad_over_root_find():
    # optimistix jits a closure over `a`, a grad tracer: JAX's caches keep it.
    for _ in range(2):
        assert abs(jax.grad(cube_root)(2.0) - 1 / (3 * 2 ** (2 / 3))) < 1e-4

def test_grad_over_root_find_stored():
    def stored(a):
        SAVED.append(a)
        return cube_root(a)
    jax.grad(stored)(2.0)
"""


DEFAULT.add("plugin", {"test_root_find.py": ROOT_FIND})


def test_tracers_only_jax_caches_keep_are_named_not_failed(default_run: Run) -> None:
    result = default_run.lines("test_root_find.py")
    if _compat.JAX_VERSION >= (0, 11):
        # JAX's checker sees eager grad from 0.11 and fails both tests: the
        # tracer the first keeps is in equinox's cache (a library's, not
        # JAX's), which the plugin then names as its holder.
        default_run.assert_outcomes("test_root_find.py", failed=2)
        result.fnmatch_lines(["*_cached_filter_eval_shape*"])
        return
    default_run.assert_outcomes("test_root_find.py", passed=1, failed=1)
    result.fnmatch_lines(
        [
            "*test_grad_over_root_find PASSED*",
            # The twin stores grad's tracer: a leak, named as one.
            "*test_grad_over_root_find_stored FAILED*",
            "*lift.LeakError: 1 tracer escaped the transform that created it:*",
            "*lift --lift-leaks: tracers kept by libraries' caches*",
            "test_root_find.py::test_grad_over_root_find: * tracer(s) still alive, "
            "held by the libraries' caches *jax._src.*, not stored by the code under "
            "test*",
        ]
    )


CYCLE = """
import gc
import jax
import lift

gc.disable()  # no collection between the test and the plugin's check

def test_garbage_cycle():
    class Node:
        pass

    def step(x):
        node = Node()
        node.me = node  # a cycle: unreachable once the test returns
        node.f = lift.lift(lambda y: y * x)
        return x

    jax.jit(step)(1.0)

STORED = []

def test_stored_cycle():
    class Node:
        pass

    def step(x):
        node = Node()
        node.me = node
        node.f = lift.lift(lambda y: y * x)
        STORED.append(node)
        return x

    jax.jit(step)(1.0)
"""


# A run of its own: the file turns the collector off for the whole run.
CYCLE_RUN = SharedRun("--lift-leaks", jax_checker=False)
CYCLE_RUN.add("plugin", {"test_cycle.py": CYCLE})


def test_a_tracer_held_only_by_garbage_fails_no_test(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # As JAX's checker, which collects garbage before it looks: a tracer no
    # live object reaches cannot be used again, and is no leak; its twin,
    # stored, is one.
    run = CYCLE_RUN(tmp_path_factory)
    run.assert_outcomes("test_cycle.py", passed=1, failed=1)
    run.lines("test_cycle.py").fnmatch_lines(
        [
            "*test_garbage_cycle PASSED*",
            "*test_stored_cycle FAILED*",
            "*lift.LeakError: 1 tracer escaped*",
            "*captured variable 'x'*",
        ]
    )


ODEINT = """
import jax
import jax.numpy as jnp
import pytest
from jax.experimental.ode import odeint

SAVED = []

def test_odeint_in_jit():
    def solve(y0, k):
        return odeint(lambda y, t: -k * y, y0, jnp.linspace(0.0, 1.0, 3))

    out = jax.jit(solve)(1.0, 2.0)
    assert abs(float(out[-1]) - float(jnp.exp(-2.0))) < 1e-3

def test_forward_mode_over_odeint_fails():
    # JAX refuses forward mode through odeint's custom_vjp (jax issue 3558),
    # leaving the trace it was in held by its own pending finalizers.
    def f(k):
        return odeint(lambda x, t: k * x, 1.0, jnp.linspace(0, 1.0, 5)).sum()

    with pytest.raises(TypeError, match="can't apply forward-mode"):
        jax.jacfwd(f)(3.0)

def test_odeint_in_jit_stored():
    def solve(y0, k):
        SAVED.append(k)
        return odeint(lambda y, t: -k * y, y0, jnp.linspace(0.0, 1.0, 3))

    jax.jit(solve)(1.0, 2.0)
"""


JAX_CHECKER.add("plugin", {"test_odeint.py": ODEINT})
DEFAULT.add("plugin", {"test_odeint.py": ODEINT})


def test_odeint_passes_as_under_jax_checker_and_a_stored_twin_fails(
    jax_checker_run: Run, default_run: Run
) -> None:
    # odeint converts its closure through JAX's cached closure_convert, whose
    # cache keeps a tracer of the jit: JAX's, not the test's, as JAX's checker
    # (which runs with the caches off) finds too.
    unstored = ("test_odeint_in_jit", "test_forward_mode_over_odeint_fails")
    jax_checker_run.assert_outcomes("test_odeint.py", only=unstored, passed=2)
    default_run.assert_outcomes("test_odeint.py", passed=2, failed=1)
    default_run.lines("test_odeint.py").fnmatch_lines(
        [
            "*test_odeint_in_jit PASSED*",
            "*test_forward_mode_over_odeint_fails PASSED*",
            "*test_odeint_in_jit_stored FAILED*",
            "*SAVED[[]0[]]: float32[[][]] from jit(solve)*",
        ]
    )


# A tracer kept in a local variable of the test or of a function on the stack
# when its trace exits: JAX's checker fails the test there; the frame drops the
# local before the phase ends, so the fast mode looks as each trace exits.
LOCALS = """
import jax
import jax.numpy as jnp

def test_local_log():
    seen = []

    def f(x):
        seen.append(x)
        return x * 2

    assert float(jax.jit(f)(1.0)) == 2.0
    assert len(seen) == 1

def run_logged(x):
    log = []
    out = jax.jit(lambda y: log.append(y) or y + 1)(x)
    assert len(log) == 1
    return out

def test_helper_local():
    assert float(run_logged(1.0)) == 2.0

def test_dict_of_lists():
    store = {"runs": {"steps": []}}

    def f(x):
        store["runs"]["steps"].append(x)
        return x

    jax.jit(f)(1.0)
    assert len(store["runs"]["steps"]) == 1

def test_vmap_of_jit_keeps_the_inner_tracer():
    def g(x):
        inner = []

        def h(y):
            inner.append(y)
            return y * 2

        out = jax.jit(h)(x)  # `inner` outlives this jit, inside the vmap
        assert len(inner) == 1
        return out

    jax.vmap(g)(jnp.arange(3.0))
"""

# The twins: what the functions on the stack hold is concrete, or a tracer of
# a transform still running (the vmap's, the grad's, the outer jit's) when an
# inner jit exits.
LOCALS_CLEAN = """
import gc
import weakref

import jax
import jax.numpy as jnp

def test_local_log_of_shapes():
    seen = []

    def f(x):
        seen.append(x.shape)
        return x * 2

    assert float(jax.jit(f)(1.0)) == 2.0
    assert seen == [()]

def test_vmap_of_jit_holds_the_outer_tracer():
    def g(x):
        outer = {"x": [x]}  # the vmap's tracer, while the vmap runs
        return jax.jit(lambda y: y * 2)(outer["x"][0]) + outer["x"][0]

    jax.vmap(g)(jnp.arange(3.0))
    jax.jit(jax.vmap(g))(jnp.arange(3.0))

def test_grad_of_jit_holds_the_outer_tracer():
    def loss(w):
        held = [w]
        return jax.jit(lambda v: v * 2)(held[0]) * held[0]

    assert float(jax.grad(loss)(1.0)) == 4.0

class Big:
    pass

def test_reading_the_locals_keeps_nothing_alive():
    big = Big()
    ref = weakref.ref(big)
    jax.jit(lambda x: x * 2)(1.0)  # its exit reads this frame's locals
    del big
    gc.collect()
    assert ref() is None, "a snapshot of this frame's locals keeps it"

def test_a_block_that_turns_the_checker_off_keeps_its_tracer():
    kept = []  # on purpose: JAX's checker is told not to look
    with jax.check_tracer_leaks(False):
        jax.jit(lambda x: kept.append(x) or x)(1.0)
    assert len(kept) == 1
"""


JAX_CHECKER.add(
    "plugin", {"test_locals.py": LOCALS, "test_locals_clean.py": LOCALS_CLEAN}
)
DEFAULT.add("plugin", {"test_locals.py": LOCALS, "test_locals_clean.py": LOCALS_CLEAN})


SEALED_LOCALS = """
import jax

class Sealed:
    @property
    def __dict__(self):
        raise RuntimeError("sealed")

def test_log_beside_a_sealed_local():
    sealed = Sealed()
    log = []
    jax.jit(lambda x: log.append(x) or x)(1.0)
    assert len(log) == 1 and sealed is not None

def test_sealed_local_clean():
    sealed = Sealed()
    shapes = []
    jax.jit(lambda x: shapes.append(x.shape) or x)(1.0)
    assert shapes == [()] and sealed is not None
"""


DEFAULT.add("plugin", {"test_sealed_locals.py": SEALED_LOCALS})


def test_a_local_the_fast_mode_cannot_open_hides_no_leak_beside_it(
    default_run: Run,
) -> None:
    # The look at the test's locals as the trace exits skips the object whose
    # `__dict__` raises, and finds the tracer in the list beside it.
    default_run.assert_outcomes("test_sealed_locals.py", passed=1, failed=1)
    default_run.lines("test_sealed_locals.py").fnmatch_lines(
        [
            "*test_log_beside_a_sealed_local FAILED*",
            "*local variable 'log' at log[[]0[]]: float32[[][]] from jit(<lambda>)*",
        ]
    )


def test_fast_mode_fails_a_test_jax_fails_for_a_tracer_kept_in_a_local(
    jax_checker_run: Run, default_run: Run
) -> None:
    # With their twins, which all pass.
    for run in (jax_checker_run, default_run):
        run.assert_outcomes("test_locals.py", failed=4)
        run.assert_outcomes("test_locals_clean.py", passed=5)
    default_run.lines("test_locals.py").fnmatch_lines(
        [
            "*LeakError: 1 tracer escaped*",
            "*test_local_log (*test_locals.py:4), local variable 'seen' at "
            "seen[[]0[]]: float32[[][]] from jit(f) — return the value from the "
            "transformed function instead of keeping it in seen*",
            "*LeakError: 1 tracer escaped*",
            "*run_logged (*test_locals.py:14), local variable 'log' at log[[]0[]]: "
            "float32[[][]] from jit(<lambda>)*",
            "*LeakError: 1 tracer escaped*",
            "*test_dict_of_lists (*), local variable 'store' at "
            "store[[]'runs'[]][[]'steps'[]][[]0[]]: float32[[][]] from jit(f)*",
            "*LeakError: 1 tracer escaped*",
            "*test_vmap_of_jit_keeps_the_inner_tracer.<locals>.g (*), local "
            "variable 'inner' at inner[[]0[]]: float32[[][]] from jit(h)*",
        ]
    )
    # The outer tracers: not kept.
    assert "from vmap" not in default_run.text("test_locals.py")
    assert "from vmap" not in default_run.text("test_locals_clean.py")


# A collection inside the trace makes it and its tracer old: the verdict reads
# the tracers those collections made old, noted while the phase runs (a
# `gc.callbacks` entry).
OLD_TRACE = """
import gc
import jax
from lift._compat import escaped

KEPT = []

def test_old_trace_keeps_a_tracer():
    def f(x):
        KEPT.append(x)
        gc.collect()
        return x * 2

    jax.jit(f)(1.0)

def test_next_notes_too():
    KEPT.clear()
    assert (escaped._PROMOTIONS.note in gc.callbacks) is escaped._GENERATIONAL
"""
DEFAULT.add("plugin", {"test_old.py": OLD_TRACE})


def test_fast_mode_fails_a_tracer_kept_in_an_old_trace(default_run: Run) -> None:
    default_run.assert_outcomes("test_old.py", passed=1, failed=1)
    default_run.lines("test_old.py").fnmatch_lines(
        [
            "*test_old_trace_keeps_a_tracer*",
            "*LeakError: 1 tracer escaped*",
            "*KEPT[[]0[]]: float32[[][]] from jit(f)*",
        ]
    )
