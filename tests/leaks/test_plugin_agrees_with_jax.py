"""The plugin's default mode (`pytest --lift-leaks`) agrees with JAX's own
checker (`JAX_CHECK_TRACER_LEAKS=1`) where the two could part: tracers held by
frames that drop them before the phase ends, and what did not escape; and its
look at the frames stays cheap on a deep stack.

Each case is a small project (one test per file, each read by its file), run
by pytest in a subprocess under the default mode and under JAX's checker (runs
shared with the plugin's other tests run so: a case with a conftest of its own
in a folder of its own). Every test here asserts the correct
behaviour, so each fails while the disagreement it names is there. Outcomes
were the same on Python 3.11 + jax 0.10.2 and Python 3.13 + jax 0.12.0.1.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import pytest
from leak_shapes import CLEAN, EAGER, IMPORTED, SHAPES, Case
from shared_runs import DEFAULT, JAX_CHECKER, Run, SharedRun

_JAX = tuple(int(p) for p in version("jax").split(".")[:2])

# A test module whose import fails its collection: runs of their own, that go
# on past such errors (the shared runs stop at the first).
_GO_ON = "--continue-on-collection-errors"
DEFAULT_IMPORTS = SharedRun("--lift-leaks", _GO_ON, jax_checker=False)
JAX_CHECKER_IMPORTS = SharedRun(_GO_ON, jax_checker=True)


# -- tests JAX's checker fails for a leak and the default mode passes ----------------

FALSE_PASSES = (
    # A global that holds the tracer when the trace exits and is emptied before
    # the phase ends: the trace is dead by then, and the frame look reads locals only.
    Case(
        "global_cleared",
        {
            "lib_global_cleared.py": """
                import jax
                _CACHE = []
                def step(x):
                    def traced(x):
                        _CACHE.append(x)
                        return x * 2
                    return jax.jit(traced)(x)
            """,
            "test_global_cleared.py": """
                import lib_global_cleared
                def test_it():
                    lib_global_cleared.step(1.0)
                    lib_global_cleared._CACHE.clear()
            """,
        },
    ),
    # A context variable set inside the trace and reset after it: the same
    # transient holder (the thread's Context), not a local.
    Case(
        "contextvar_reset",
        {
            "lib_contextvar_reset.py": """
                import contextvars, jax
                CV = contextvars.ContextVar("cv", default=None)
                def step(x):
                    tok = []
                    def traced(x):
                        tok.append(CV.set(x))
                        return x * 2
                    out = jax.jit(traced)(x)
                    CV.reset(tok[0])
                    return out
            """,
            "test_contextvar_reset.py": """
                import lib_contextvar_reset
                def test_it():
                    lib_contextvar_reset.step(1.0)
            """,
        },
    ),
    # A `weakref.finalize` registered inside the trace (held by the finalize
    # registry until its object dies, inside the test).
    Case(
        "weakref_finalize",
        {
            "test_weakref_finalize.py": """
                import jax, weakref
                class Obj: pass
                def test_it():
                    o = Obj()
                    def f(x):
                        weakref.finalize(o, lambda v: None, x)
                        return x
                    jax.jit(f)(1.0)
                    del o
            """
        },
    ),
    # The frame look read a dict's values only: a tracer in an object used as
    # a key of a local dict (keyed by handles) passed.
    Case(
        "dict_key_local",
        {
            "test_dict_key_local.py": """
                import jax
                class Handle:
                    def __init__(self, v):
                        self.v = v
                def test_it():
                    seen = {"lr": 0.1}
                    def f(x):
                        seen[("step", Handle(x))] = 1
                        return x
                    jax.jit(f)(1.0)
            """
        },
    ),
    # The frame look once skipped an instance with `__slots__` (no `__dict__`)
    # held by a local.
    Case(
        "slots_local",
        {
            "test_slots_local.py": """
                import jax
                class S:
                    __slots__ = ("v",)
                def test_it():
                    s = S()
                    def f(x):
                        s.v = x
                        return x
                    jax.jit(f)(1.0)
            """
        },
    ),
    # The same with `@dataclass(slots=True)`.
    Case(
        "dataclass_slots_local",
        {
            "test_dataclass_slots_local.py": """
                import jax, dataclasses
                @dataclasses.dataclass(slots=True)
                class S:
                    v: object = None
                def test_it():
                    s = S()
                    def f(x):
                        s.v = x
                        return x
                    jax.jit(f)(1.0)
            """
        },
    ),
    # The frame look once skipped exceptions: an error built on a tracer, kept
    # in a local list, was not seen.
    Case(
        "exception_in_local",
        {
            "test_exception_in_local.py": """
                import jax
                def test_it():
                    errs = []
                    def f(x):
                        errs.append(ValueError(x))
                        return x
                    jax.jit(f)(1.0)
            """
        },
    ),
    # The frame look opens a `functools.partial`'s `__dict__` only, not its args.
    Case(
        "partial_in_local_dict",
        {
            "test_partial_in_local_dict.py": """
                import jax, functools
                def g(a): return a
                def test_it():
                    d = {}
                    def f(x):
                        d["p"] = functools.partial(g, x)
                        return x
                    jax.jit(f)(1.0)
            """
        },
    ),
    # A suspended generator held by a local: its frame is not on the stack and
    # the generator object is a builtin type the frame look skips.
    Case(
        "generator_local",
        {
            "test_generator_local.py": """
                import jax
                def keeper():
                    buf = []
                    while True:
                        v = yield
                        buf.append(v)
                def test_it():
                    g = keeper(); next(g)
                    def f(x):
                        g.send(x)
                        return x
                    jax.jit(f)(1.0)
            """
        },
    ),
    # A NumPy object array held by a local (numpy is a closed package to the frame look).
    Case(
        "numpy_object_local",
        {
            "test_numpy_object_local.py": """
                import jax, numpy as np
                def test_it():
                    a = np.empty(1, dtype=object)
                    def f(x):
                        a[0] = x
                        return x
                    jax.jit(f)(1.0)
            """
        },
    ),
    # Five levels of plain dicts and a list.
    Case(
        "deep_nesting",
        {
            "test_deep_nesting.py": """
                import jax
                def test_it():
                    d = {"a": {"b": {"c": {"d": []}}}}
                    def f(x):
                        d["a"]["b"]["c"]["d"].append(x)
                        return x
                    jax.jit(f)(1.0)
            """
        },
    ),
    # A local list with 1200 numbers before the tracer: past `_FRAME_BUDGET`.
    Case(
        "budget_local",
        {
            "test_budget_local.py": """
                import jax
                def test_it():
                    seen = list(range(1200))
                    def f(x):
                        seen.append(x)
                        return x
                    jax.jit(f)(1.0)
            """
        },
    ),
    # A trace exiting in a worker thread, which JAX_CHECK_TRACER_LEAKS=1 checks
    # as it checks the test's own: a local of the worker...
    Case(
        "thread_local_list",
        {
            "test_thread_local_list.py": """
                import jax
                from concurrent.futures import ThreadPoolExecutor
                def work():
                    seen = []
                    jax.jit(lambda x: (seen.append(x), x)[1])(1.0)
                    return len(seen)
                def test_it():
                    with ThreadPoolExecutor(1) as ex:
                        assert ex.submit(work).result() == 1
            """
        },
    ),
    # ... and a closure only `atexit` holds (as when the trace exits in the
    # test's own thread: test_leaks_projects' held_by_no_variable).
    Case(
        "thread_atexit",
        {
            "lib_thread_atexit.py": """
                import atexit, jax
                def step(x):
                    def traced(x):
                        atexit.register(lambda: x)
                        return x * 2
                    return jax.jit(traced)(x)
            """,
            "test_thread_atexit.py": """
                import lib_thread_atexit
                from concurrent.futures import ThreadPoolExecutor
                def test_it():
                    with ThreadPoolExecutor(1) as ex:
                        ex.submit(lib_thread_atexit.step, 1.0).result()
            """,
        },
    ),
)

# -- tests JAX's checker passes and the default mode fails ---------------------------

SHARED = """
import pytest
@pytest.fixture(scope="session")
def stash():
    return []
"""

FALSE_REPORTS = (
    # A session fixture's value is not part of what `_BEFORE` notes at setup
    # (`pytest_runtest_setup` scans `_roots(item)` before pytest fills
    # `item.funcargs`), so a tracer an earlier test left in it is blamed on the
    # next test that requests it (a setup error), and only when it runs after.
    Case(
        "shared_fixture_next_test",
        {
            "conftest.py": SHARED,
            "test_shared_fixture_next_test_a.py": """
                import jax
                def test_a(stash):
                    jax.jit(lambda x: (stash.append(x), x)[1])(1.0)
            """,
            "test_shared_fixture_next_test_b.py": """
                def test_b(stash):
                    assert len(stash) == 1
            """,
        },
    ),
    # The same when the first test is exempt (`lift_allow_leaks`) and keeps the
    # tracer with JAX's checker off on purpose: the clean next test fails.
    Case(
        "shared_fixture_after_allowed",
        {
            "conftest.py": SHARED,
            "test_shared_fixture_after_allowed_a.py": """
                import jax, pytest
                @pytest.mark.lift_allow_leaks
                def test_a(stash):
                    with jax.check_tracer_leaks(False):
                        jax.jit(lambda x: (stash.append(x), x)[1])(1.0)
            """,
            "test_shared_fixture_after_allowed_b.py": """
                def test_b(stash):
                    assert len(stash) == 1
            """,
        },
    ),
    # A test that provokes a leak under JAX's own checker, catches its report
    # and drops the tracer: the frame look (run before `ensure_no_leaks`
    # raises) still records the local and fails the test; exhaustive passes it.
    Case(
        "caught_under_jax_checking_leaks",
        {
            "test_caught_under_jax_checking_leaks.py": """
                import jax, pytest
                def test_it():
                    held = []
                    with pytest.raises(Exception, match="Leaked"):
                        with jax.checking_leaks():
                            jax.jit(lambda x: (held.append(x), x)[1])(1.0)
                    held.clear()
            """
        },
    ),
    # The same with `lift.checking_leaks()` and its `LeakError`.
    Case(
        "caught_under_lift_checking_leaks",
        {
            "test_caught_under_lift_checking_leaks.py": """
                import jax, pytest, lift
                def test_it():
                    held = []
                    with pytest.raises(lift.LeakError):
                        with lift.checking_leaks():
                            jax.jit(lambda x: (held.append(x), x)[1])(1.0)
                    held.clear()
            """
        },
    ),
    # The same with a `lift.checked` function's `LeakError`: the frame look
    # saw `held` holding the tracer as the trace exited, and failed the test
    # the code had already made pass.
    Case(
        "caught_from_lift_checked",
        {
            "test_caught_from_lift_checked.py": """
                import jax, pytest, lift
                def test_it():
                    held = []
                    with pytest.raises(lift.LeakError):
                        lift.checked(jax.jit)(lambda x: (held.append(x), x)[1])(1.0)
                    held.clear()
            """
        },
    ),
    # A weak reference, from a test's local, to a cycle that holds a tracer:
    # garbage at the trace's exit, which JAX's checker collects before it
    # looks. The frame look, which runs before any collection, followed the
    # reference, named the tracer and kept it alive to the end of the phase.
    Case(
        "weakly_held_garbage",
        {
            "test_weakly_held_garbage.py": """
                import gc, weakref, jax
                class Box:
                    def __init__(self, v):
                        self.v, self.me = v, self  # a cycle: freed by the collector
                def test_it():
                    refs = []
                    members = weakref.WeakSet()
                    def f(x):
                        box = Box(x * 2)
                        refs.append(weakref.ref(box))
                        members.add(box)
                        return x
                    jax.jit(f)(1.0)
                    gc.collect()
                    assert all(r() is None for r in refs) and not members
            """
        },
    ),
)

FALSE_PASSES += SHAPES
FALSE_REPORTS += CLEAN
ALL = FALSE_PASSES + FALSE_REPORTS + EAGER


def _tests(case: Case) -> list[str]:
    return [f for f in case.files if f.startswith("test_")]


# The cases without a conftest of their own share a folder (their files'
# names are their own); one with a conftest (the false reports' session
# fixtures) has a folder of its own, where its fixture is its own.
for _case in ALL:
    _folder = "agrees" if "conftest.py" not in _case.files else f"agrees_{_case.name}"
    _pair = (
        (DEFAULT_IMPORTS, JAX_CHECKER_IMPORTS)
        if _case in IMPORTED
        else (DEFAULT, JAX_CHECKER)
    )
    for _run in _pair:
        _run.add(_folder, _case.files)


@pytest.fixture(scope="module")
def all_runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[bool, tuple[Run, Run]]:
    """The cases under the default mode and under JAX's checker (by whether
    they fail at import)."""
    return {
        False: (DEFAULT(tmp_path_factory), JAX_CHECKER(tmp_path_factory)),
        True: (
            DEFAULT_IMPORTS(tmp_path_factory),
            JAX_CHECKER_IMPORTS(tmp_path_factory),
        ),
    }


@pytest.fixture
def runs(
    request: pytest.FixtureRequest, all_runs: dict[bool, tuple[Run, Run]]
) -> tuple[Run, Run]:
    """The runs of the case the test is given."""
    case = request.node.callspec.params["case"]
    return all_runs[case in IMPORTED]


@pytest.mark.parametrize("case", FALSE_PASSES, ids=[c.name for c in FALSE_PASSES])
def test_default_mode_fails_what_jax_fails(case: Case, runs: tuple[Run, Run]) -> None:
    ours, theirs = runs
    (test,) = _tests(case)
    jax_says, report = theirs.failures(test), ours.failures(test)
    assert jax_says is not None and "Leaked" in jax_says, theirs.text(test)
    assert report is not None, "the default mode passed a leak JAX's checker fails"
    assert "LeakError" in report or "tracer" in report, report


@pytest.mark.parametrize("case", SHAPES, ids=[c.name for c in SHAPES])
def test_the_report_names_the_holder_or_its_referrer_chain(
    case: Case, runs: tuple[Run, Run]
) -> None:
    # Whatever holds the tracer, the report says where: the variable, or the
    # chain of referrers from the tracer up, never a bare "no variable".
    ours, _ = runs
    (test,) = _tests(case)
    report = ours.failures(test) or ""
    assert case.shows in report, ours.text(test)
    assert "lift/_leaks/plugin.py" not in report, report


@pytest.mark.parametrize("case", FALSE_REPORTS, ids=[c.name for c in FALSE_REPORTS])
def test_default_mode_passes_what_jax_passes(case: Case, runs: tuple[Run, Run]) -> None:
    ours, theirs = runs
    for test in _tests(case):
        if test.endswith("_a.py"):  # the test that does keep the tracer
            continue
        if _JAX_PASSES.get(case.name, lambda: True)():
            assert theirs.outcomes(test) == {"passed": 1}, theirs.text(test)
        assert ours.outcomes(test) == {"passed": 1}, ours.text(test)


@pytest.mark.parametrize("case", EAGER, ids=[c.name for c in EAGER])
def test_default_mode_fails_an_eager_transform_as_jax_does(
    case: Case, runs: tuple[Run, Run]
) -> None:
    # Whether JAX checks an eager transform's trace depends on its version
    # (`grad` from 0.11); the default mode's verdict is JAX's either way.
    ours, theirs = runs
    (test,) = _tests(case)
    jax_says, report = theirs.failures(test), ours.failures(test)
    assert (report is None) == (jax_says is None), report or jax_says
    if _JAX < (0, 11):  # measured: JAX's checker passes each, at 0.8.0 and 0.10.2
        assert theirs.outcomes(test) == {"passed": 1}, theirs.text(test)


# Where JAX's checker itself fails a clean case, by the JAX it runs on.
_JAX_PASSES = {
    # From jax 0.11 it fails this one on its own cache
    # (`pjit._infer_params_cached` keeps the linearize tracer): lift excuses
    # JAX's caches (SPEC 3) and passes it.
    "eqx_grad_over_filter_jit_closure": lambda: _JAX < (0, 11),
    # jax 0.8.0 fails 10 of the 14 tests of equinox's test_errors.py, eager
    # `eqx.error_if` too, with jax issue 26560's IndexError (0.10.2 passes
    # them); lift's run of that checker (the exhaustive mode) passes this one.
    "eqx_vmapped_error_if": lambda: _JAX >= (0, 10),
}


# -- cost ------------------------------------------------------------------------------


def _recurse(n: int, work: object) -> float:
    pad = [0.0] * 50  # noqa: F841  (a user frame's locals, as a real helper has)
    if n == 0:
        return work()  # type: ignore[operator]
    return _recurse(n - 1, work)


def _counting_frame_reads(
    monkeypatch: pytest.MonkeyPatch, leaky: bool, exits: int = 10
) -> tuple[list[int], list[int]]:
    """Under 400 user frames, `exits` `jit` traces exit, each keeping its
    tracer until JAX's check of it (`leaky`) or not: the looks at the
    verdicts of JAX's checks, and the frames whose locals were read."""
    import jax
    import jax.numpy as jnp

    from lift._compat import ExitedTrace, LeakSignal, watching_trace_exits
    from lift._leaks import frames
    from lift._leaks.frames import FrameLook

    reads: list[int] = []
    looks: list[int] = []
    read = frames.frame_locals
    look = FrameLook()

    looking: list[int] = []  # reads of this look alone, not the plugin's own

    def counting_reads(*args: Any, **kwargs: Any) -> Any:
        reads.extend(looking)
        return read(*args, **kwargs)

    def counting_looks(signal: LeakSignal) -> None:
        looks.append(1)
        looking.append(1)
        try:
            look.at_exit(ExitedTrace(signal.trace), signal.frame)
        finally:
            looking.clear()

    monkeypatch.setattr(frames, "frame_locals", counting_reads)
    kept: list[Any] = []

    def work() -> float:
        for _ in range(exits):
            jax.jit(lambda x: (kept.append(x) if leaky else None) or jnp.sin(x))(
                jnp.ones(3)
            )
            kept.clear()
        return 0.0

    prev = jax.config.jax_check_tracer_leaks
    jax.config.update("jax_check_tracer_leaks", False)  # the fast mode's setting
    try:
        with watching_trace_exits(every=True, leaked=counting_looks):
            _recurse(400, work)
    finally:
        jax.config.update("jax_check_tracer_leaks", prev)
    return looks, reads


@pytest.mark.lift_allow_leaks  # its traces keep their tracers until the check
def test_frame_look_reads_a_bounded_number_of_frames_on_a_deep_stack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Under 400 user frames, the look at JAX's verdict on a trace reads the
    # locals of at most the innermost 8 and outermost 4 (it read all 400
    # before, about 3 times plain's cost), so a deep stack costs no more than
    # a shallow one. Counted, not timed.
    looks, reads = _counting_frame_reads(monkeypatch, leaky=True)
    assert len(looks) >= 10  # a look at each trace's check, at least
    assert 0 < len(reads) <= 12 * len(looks)  # not 400 a look


def test_the_frames_of_a_trace_no_tracer_outlives_are_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # JAX's check of a trace no tracer holds finds it freed: no verdict, and
    # no frame is read.
    looks, reads = _counting_frame_reads(monkeypatch, leaky=False)
    assert looks == []
    assert reads == []


@pytest.mark.lift_allow_leaks  # it keeps a tracer on purpose, as the block sees
def test_a_tracer_kept_then_dropped_by_the_caller_is_seen_before_jit_returns() -> None:
    # JAX's own check of a `jit` trace (`core.ensure_no_leaks`) runs before
    # `jax.jit` returns: the look at its verdict finds a tracer the caller's
    # list keeps then, though the caller drops it as soon as `jax.jit`
    # returns (JAX's checker fails such a test too).
    import jax
    import jax.numpy as jnp

    from lift._compat import ExitedTrace, LeakSignal, watching_trace_exits
    from lift._leaks.frames import FrameHolding, FrameLook

    told: list[FrameHolding] = []
    seen: list[Any] = []

    def tell(signal: LeakSignal) -> None:
        told.extend(FrameLook().at_exit(ExitedTrace(signal.trace), signal.frame))

    @jax.jit
    def f(x: Any) -> Any:
        seen.append(x)
        return x

    prev = jax.config.jax_check_tracer_leaks
    jax.config.update("jax_check_tracer_leaks", False)  # the fast mode's setting
    try:
        with watching_trace_exits(every=True, leaked=tell):
            f(jnp.ones(3))
            seen.clear()
    finally:
        jax.config.update("jax_check_tracer_leaks", prev)
    assert [name for holding in told for name, _ in holding.tracers] == ["seen"]
