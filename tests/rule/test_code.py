"""Reading a function's bytecode by scope: which captures feed Python control flow
(kept static), which are rebound (refused when dynamic), on Python 3.11 to 3.13.

Python 3.12 inlines comprehensions (PEP 709), so a comprehension's variable is a
local of the function around it; 3.13 fuses instructions
(`LOAD_FAST_LOAD_FAST`, `STORE_FAST_LOAD_FAST`). Names alone cannot tell a
capture from a local of the same name: scopes can. Generated programs (below)
mix every way code can branch on a capture, shadow it or rebind it, and check
that exactly the captures Python branches on are static; others mix the ways
code mutates a captured container (iterating it, through accessors' results,
comprehensions, aliases) with reads of the same shapes, and check that a call
is refused exactly when it mutated a container lift rebuilt.
"""

from __future__ import annotations

import functools
import math
import os
import re
import textwrap
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import TraceCounter, call_lifted
from hypothesis import HealthCheck, given, settings, strategies as st

import lift
from lift._rule.code import code_info

_EXAMPLES = {"ci": 300, "dev": 40, "long": 5000}[
    os.environ.get("LIFT_HYPOTHESIS_PROFILE", "ci")
]
_SETTINGS = settings(
    max_examples=_EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("LIFT_HYPOTHESIS_PROFILE", "ci") == "ci",
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _dynamic_names(lifted: Any) -> set[str]:
    """The captured variables that became leaves."""
    paths = jax.tree_util.tree_flatten_with_path(lifted)[0]
    return {
        m[1]
        for path, _ in paths
        if (m := re.match(r"\.captures\['(\w+)'\]", jax.tree_util.keystr(path)))
    }


def _traces_over(make: Any, values: list[float]) -> int:
    counter = TraceCounter()
    run = counter.jit(call_lifted)
    for v in values:
        run(lift.lift(make(v)), 1.0)
    return counter.traces


# -- comprehensions, nested scopes -------------------------------------------------


def test_a_comprehension_variable_named_like_a_capture_is_not_the_capture():
    def make(lr):
        def f(x):
            ys = [1 for lr in range(3) if 0 < lr]  # noqa: SIM300 (the loop's `lr`)
            return x * lr + len(ys)

        return f

    assert _traces_over(make, [0.1, 0.2, 0.3]) == 1
    assert lift.lift(make(0.5))(1.0) == make(0.5)(1.0)


def test_a_nested_comprehension_named_like_a_capture_and_a_parameter():
    def make(lr):
        def f(x, p=2):
            ys = [[p for p in range(lr_) if p > 0] for lr_ in range(3) if lr_ > 0]
            zs = [1 for lr in ys if lr]  # a list of lists, truth-tested
            return x * lr + len(zs)

        return f

    info = code_info(make(0.1).__code__)
    assert "lr" not in info.branched
    assert _traces_over(make, [0.1, 0.2]) == 1


def test_a_nested_functions_own_local_named_like_a_capture_is_not_the_capture():
    def make(lr):
        def f(x):
            def g():
                lr = 2.0  # g's own

                def h():
                    return 1.0 if lr > 0 else 0.0

                return h()

            return x * lr + g()

        return f

    assert "lr" not in code_info(make(0.1).__code__).branched
    assert _traces_over(make, [0.1, 0.2, 0.3]) == 1


def test_a_branch_in_a_nested_function_on_the_capture_keeps_it_static():
    def make(lr):
        def f(x):
            def g():
                return 1.0 if lr > 0.15 else 0.0

            return x * lr + g()

        return f

    assert lift.lift(make(0.1))(1.0) == make(0.1)(1.0)
    assert lift.lift(make(0.2))(1.0) == make(0.2)(1.0)
    counter = TraceCounter()
    run = counter.jit(call_lifted)
    assert float(run(lift.lift(make(0.2)), 1.0)) == pytest.approx(1.2)
    assert "lr" not in _dynamic_names(lift.lift(make(0.2)))


@pytest.mark.parametrize(
    "condition",
    [
        "lo < 1.0 < hi",  # a chained comparison (COPY, SWAP between the loads)
        "1.0 < lo * 4.0 < hi",  # arithmetic first
        "not lo > hi",
        "lo and hi",
        "lo > 0.0 or hi < 0.0",
        "lo in (0.5, hi)",
        "(lo if hi > 0 else 0.0) > 0.0",
        "(not lo) != (not hi)",  # a `not` whose result is compared, not jumped on
    ],
)
def test_every_form_of_python_branch_on_captures_keeps_them_static(condition):
    src = textwrap.dedent(
        f"""
        def make(lo, hi):
            def f(x):
                if {condition}:
                    return x * lo * hi
                return x * (lo + hi)
            return f
        """
    )
    space: dict[str, Any] = {}
    exec(src, space)
    make = space["make"]
    for lo, hi in [(0.5, 2.0), (0.25, 0.5), (0.0, -1.0)]:
        assert lift.lift(make(lo, hi))(1.0) == make(lo, hi)(1.0)
        assert float(lift.jit(make(lo, hi))(1.0)) == pytest.approx(
            make(lo, hi)(1.0), rel=1e-6
        )
    assert _dynamic_names(lift.lift(make(0.5, 2.0))) == set()


def test_a_while_loop_and_assert_on_a_capture_keep_it_static():
    def make(n, tol):
        def f(x):
            assert tol > 0.0
            k = 0.0
            while n > k + 0.5:
                x = x * 2.0
                k = k + 1.0
            return x

        return f

    assert lift.jit(make(3.0, 1e-3))(1.0) == 8.0
    assert _dynamic_names(lift.lift(make(3.0, 1e-3))) == set()


def test_a_branch_after_a_handler_that_continues_a_loop_keeps_the_capture_static():
    # `except ... as err: continue` leaves code no jump reaches (its cleanup of
    # `err`) in the bytecode: read past it, the branch below is still seen.
    def make(lr):
        def f(x):
            for k in (1.0, 2.0):
                try:
                    x = x + k
                except ValueError as err:  # noqa: F841 (the `as` makes the cleanup)
                    continue
            if lr > 0.5:
                return x * 2.0
            return x

        return f

    assert _dynamic_names(lift.lift(make(0.7))) == set()
    assert float(lift.jit(make(0.7))(1.0)) == 8.0
    assert float(lift.jit(make(0.3))(1.0)) == 4.0


def test_a_class_body_branching_on_a_capture_keeps_it_static():
    # A class body reads the capture with its own instruction
    # (`LOAD_CLASSDEREF`, 3.12+ `LOAD_FROM_DICT_OR_DEREF`).
    def make(lr):
        def f(x):
            class Config:
                scale = 2.0 if lr > 0.5 else 1.0

            return x * Config.scale

        return f

    assert _dynamic_names(lift.lift(make(0.7))) == set()
    assert float(lift.jit(make(0.7))(1.0)) == 2.0
    assert float(lift.jit(make(0.3))(1.0)) == 1.0


def test_an_isinstance_guard_keeps_the_capture_dynamic():
    # optax's `isinstance(weight_decay, (int, float)) and weight_decay == 0.0`
    def make(wd):
        def f(x):
            if isinstance(wd, (int, float)) and wd == 0.0:
                return x
            return x * wd

        return f

    assert _dynamic_names(lift.lift(make(0.5))) == {"wd"}
    assert _traces_over(make, [0.5, 0.25]) == 1


def test_two_parameters_compared_under_a_superinstruction_count_as_a_branch():
    # 3.13 loads both with one LOAD_FAST_LOAD_FAST.
    def f(m, p):
        if m == p:
            return p
        return 0

    def g(m, p):
        return [p for p in range(3) if p]  # the comprehension's `p`, not `f`'s

    def h(m, p):
        return m * p

    assert code_info(f.__code__).branches_on_params
    assert code_info(h.__code__).branches_on_params is False
    assert code_info(g.__code__).branches_on_params is False


def test_branch_sites_name_the_line():
    def make(b2):
        def f(x):
            y = x * 2
            if b2 != 1.0:  # here
                y = y * b2
            return y

        return f

    info = code_info(make(0.5).__code__)
    filename, line = info.branch_sites["b2"]
    assert filename == __file__
    with open(filename) as source:
        assert "# here" in source.read().splitlines()[line - 1]


# -- rebinding -------------------------------------------------------------------


def test_nonlocal_in_a_nested_def_rebinding_a_dynamic_capture_is_refused():
    def make(lr):
        def f(x):
            def bump():
                nonlocal lr
                lr = lr * 2

            bump()
            return x * lr

        return f

    with pytest.raises(lift.LiftError, match=r"rebinds the captured variable 'lr'"):
        lift.lift(make(jnp.float32(0.1)))
    with pytest.raises(lift.LiftError, match=r"'lr'"):
        lift.jit(make(jnp.float32(0.1)))(1.0)


def test_nonlocal_deeper_down_and_through_a_lambda_is_refused():
    def make(lr):
        def f(x):
            def outer():
                def inner():
                    nonlocal lr
                    del lr

                return inner

            return x * lr, outer

        return f

    with pytest.raises(lift.LiftError, match=r"rebinds the captured variable 'lr'"):
        lift.lift(make(jnp.float32(0.1)))


def test_a_nested_def_rebinding_its_own_variable_of_that_name_is_fine():
    def make(lr):
        def f(x):
            def g():
                lr = 1.0

                def h():
                    nonlocal lr
                    lr = 2.0

                h()
                return lr

            return x * lr + g()

        return f

    assert "lr" not in code_info(make(0.1).__code__).rebound
    assert _traces_over(make, [0.1, 0.2]) == 1


def test_nonlocal_in_a_nested_def_rebinding_a_static_capture_acts_on_the_copy():
    def make(steps):
        def f(x):
            def bump():
                nonlocal steps
                steps = steps + 1

            bump()
            return x * steps

        return f

    original = make(1)
    lifted = lift.lift(original)
    assert lifted(1.0) == 2.0
    assert original.__closure__[0].cell_contents == 1  # type: ignore[index]


# -- decorators --------------------------------------------------------------------


class _Base:
    def f(self, x):
        return x * 2.0


@pytest.mark.parametrize("decorate", [lift.lift, lift.jit], ids=["lift", "jit"])
def test_decorating_a_method_that_calls_super(decorate):
    # The `__class__` cell is empty while the class body runs: Python fills it
    # once the class exists, and the decorated method must see it then.
    import equinox as eqx

    class Base(eqx.Module):
        w: jax.Array

        def f(self, x):
            return x * self.w

    class Child(Base):
        @decorate
        def f(self, x):
            return super().f(x) + 1.0

    assert float(Child(jnp.float32(2.0)).f(1.0)) == 3.0

    class Plain(_Base):
        @staticmethod
        @decorate
        def g(x):
            return x + 1.0

        @lift.lift
        def f(self, x):
            return super().f(x) + 1.0

    assert float(Plain.g(1.0)) == 2.0
    assert Plain().f(1.0) == 3.0


@pytest.mark.parametrize("decorate", [lift.lift, lift.jit], ids=["lift", "jit"])
def test_decorating_a_function_that_names_what_is_defined_after_it(decorate):
    def make(scale):
        @decorate
        def f(x):
            return helper(x) * scale

        def helper(x):
            return x + 1.0

        return f

    assert float(make(2.0)(1.0)) == 4.0
    assert float(make(3.0)(1.0)) == 6.0


def test_decorating_a_recursive_function():
    @lift.lift
    def power(x, n):
        return x if n == 1 else x * power(x, n - 1)

    assert power(2.0, 3) == 8.0

    @(lambda f: lift.lift(f))
    def fact(n):
        return 1 if n == 0 else n * fact(n - 1)

    assert fact(5) == 120

    @functools.partial(lift.lift, static=())
    def down(n):
        return 0 if n == 0 else down(n - 1)

    assert down(3) == 0


def test_an_empty_cell_is_still_a_nameerror_until_python_binds_it():
    def make():
        @lift.lift
        def f(x):
            return x * later

        with pytest.raises(NameError, match="later"):
            f(1.0)
        later = 2.0
        assert f(1.0) == 2.0
        return f

    make()


# -- generated programs ------------------------------------------------------------

_CAPTURES = ("a", "b", "c")


@st.composite
def _program(draw: st.DrawFn) -> tuple[str, set[str], set[str]]:
    """Source of `make(a, b, c)` returning a closure `f(x)`, the captures its code
    branches on in Python, and the captures it rebinds from a nested `def`."""
    lines: list[str] = []
    branched: set[str] = set()
    rebound: set[str] = set()
    pick = st.sampled_from(_CAPTURES)
    for k in range(draw(st.integers(1, 6))):
        v = draw(pick)
        w = draw(pick)
        form = draw(st.integers(0, 13))
        if form == 0:
            lines.append(f"if {v} > 0.5: x = x + 1.0")
            branched.add(v)
        elif form == 1:
            lines.append(f"if -1.0 < {v} * 2.0 < 1.0: x = x - 1.0")
            branched.add(v)
        elif form == 2:
            lines.append(f"x = x + 1.0 if {v} != {w} else x")
            branched.update((v, w))
        elif form == 3:
            lines.append(f"x = x * {v}")
        elif form == 4:  # a comprehension's variable named like a capture
            lines.append(f"ys{k} = [{w} for {v} in range(3) if {v} > 0]")
            lines.append(f"x = x + len(ys{k})")
            if w != v:
                pass  # `w` is read, not branched on
        elif form == 5:  # a nested function's own local named like a capture
            lines.append(f"def g{k}():")
            lines.append(f"    {v} = 3.0")
            lines.append(f"    return 1.0 if {v} > 0 else 0.0")
            lines.append(f"x = x + g{k}()")
        elif form == 6:  # a nested function branching on the capture
            lines.append(f"def g{k}():")
            lines.append(f"    return 1.0 if {v} > 0.5 else 0.0")
            lines.append(f"x = x + g{k}()")
            branched.add(v)
        elif form == 7:
            # (a traced `v` skips the block, which adds nothing when it runs)
            lines.append(f"if isinstance({v}, float) and {v} == 0.0: x = x + {v}")
        elif form == 8:
            lines.append(f"if not {v}: x = x + 2.0")
            branched.add(v)
        elif form == 9:
            lines.append(f"h{k} = lambda y: y * {v}")
            lines.append(f"x = h{k}(x)")
        elif form == 10:  # rebinding from a nested `def`
            lines.append(f"def bump{k}():")
            lines.append(f"    nonlocal {v}")
            lines.append(f"    {v} = {v} + 0.0")
            lines.append(f"bump{k}()")
            rebound.add(v)
        elif form == 11:
            lines.append(f"n{k} = {v}")
            lines.append(f"while n{k} > 1.0: n{k} = n{k} - 1.0")
            lines.append(f"x = x + n{k}")
            branched.add(v)
        elif form == 12:
            lines.append(f"if [{v} for _ in range(1)][0] > 0.5: x = x + 1.0")
            lines.append(f"x = x * {w}")
        else:
            lines.append(f"zs{k} = {{{v}: 1 for {v} in range(2)}}")
            lines.append(f"x = x + len(zs{k}) * {w}")
    body = textwrap.indent("\n".join(lines), " " * 8)
    src = (
        "def make(a, b, c):\n"
        "    def f(x):\n"
        f"{body}\n"
        "        return x * (a + b + c)\n"
        "    return f\n"
    )
    return src, branched, rebound


def _untraceable(src: str) -> bool:
    """Programs that branch through a list element: Python control flow lift
    does not follow (eagerly the capture is a concrete array and works;
    under `jit` JAX's error names the capture)."""
    return "][0] > 0.5" in src


def _build(src: str) -> Any:
    space: dict[str, Any] = {}
    exec(compile(src, "<generated>", "exec"), space)
    return space["make"]


_VALUES = st.tuples(*[st.sampled_from([0.0, 0.25, 0.75, -1.5]) for _ in _CAPTURES])


@_SETTINGS
@given(_program(), _VALUES)
def test_generated_programs_keep_exactly_the_branched_captures_static(
    program: tuple[str, set[str], set[str]], values: tuple[float, ...]
):
    src, branched, rebound = program
    make = _build(src)
    fn = make(*values)
    info = code_info(fn.__code__)
    assert info.branched == branched, src
    assert info.rebound == rebound, src
    lifted = lift.lift(fn)  # a float it rebinds is static, as one it branches on
    assert _dynamic_names(lifted) == set(_CAPTURES) - branched - rebound, src
    expected = fn(1.0)
    got = lifted(1.0)
    assert math.isclose(float(got), expected, rel_tol=1e-5, abs_tol=1e-6), src


@settings(_SETTINGS, max_examples=max(10, _EXAMPLES // 10))
@given(_program(), _VALUES, _VALUES)
def test_generated_programs_trace_once_per_static_values_under_jit(
    program: tuple[str, set[str], set[str]],
    first: tuple[float, ...],
    second: tuple[float, ...],
):
    src, branched, rebound = program
    if _untraceable(src):
        return
    make = _build(src)
    # Same static values, other dynamic ones: one program serves both.
    mixed = tuple(
        f if name in branched | rebound else s
        for name, f, s in zip(_CAPTURES, first, second, strict=True)
    )
    counter = TraceCounter()
    run = counter.jit(call_lifted)
    for values in (first, mixed):
        out = run(lift.lift(make(*values)), 1.0)
        assert np.isclose(float(out), make(*values)(1.0), rtol=1e-5, atol=1e-6), src
    assert counter.traces == 1, src


# -- generated programs: mutation of captured containers -------------------------
#
# Bodies mix ways code mutates a captured list or dict (through iteration,
# accessors' results, comprehensions and generator expressions, aliases and
# unbound methods) with reads of the same shapes. Lifted over containers
# holding floats (rebuilt), a call is refused iff it mutated one, the
# containers intact; over containers of ints (the user's own), the lifted
# function changes them as the plain one changes copies. Each form's names
# carry its index (`row3`).

# (container, lines, whether they mutate it)
_MUTATION_FORMS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("rows", ("for row{k} in rows: row{k}.append(1.0)",), True),
    (
        "rows",
        ("for i{k}, row{k} in enumerate(rows): row{k}.append(float(i{k}))",),
        True,
    ),
    ("rows", ("for row{k}, j{k} in zip(rows, range(3)): row{k}.append(1.0)",), True),
    ("rows", ("next(iter(rows)).append(1.0)",), True),
    ("rows", ("[row{k}.append(1.0) for row{k} in rows]",), True),
    ("rows", ("any(row{k}.append(1.0) for row{k} in rows)",), True),
    ("rows", ("list(rows)[0].append(1.0)",), True),
    ("rows", ("rows[:][-1].append(1.0)",), True),
    ("rows", ("app{k} = list.append", "app{k}(rows[0], 1.0)"), True),
    ("rows", ("rows[0].append(1.0)",), True),
    ("rows", ("for row{k} in rows: total += len(row{k})",), False),
    ("rows", ("total += sum(len(row{k}) for row{k} in rows)",), False),
    ("rows", ("copy{k} = list(rows)", "copy{k}.append([1.0])"), False),
    ("rows", ("first{k}, *rest{k} = rows", "rest{k}.append(first{k})"), False),
    (
        "rows",
        ("sizes{k} = [len(row{k}) for row{k} in rows]", "sizes{k}.append(0)"),
        False,
    ),
    ("d", ("for _, row{k} in d.items(): row{k}.append(1.0)",), True),
    ("d", ("for row{k} in d.values(): row{k}.append(1.0)",), True),
    ("d", ("d.get('a').append(1.0)",), True),
    ("d", ("d.setdefault('a', []).append(1.0)",), True),
    ("d", ("dict.get(d, 'a').append(1.0)",), True),
    ("d", ("{{n{k}: r{k}.append(1.0) for n{k}, r{k} in d.items()}}",), True),
    (
        "d",
        ("for n{k}, row{k} in d.items():", "    n{k} += '/'", "    total += len(n{k})"),
        False,
    ),
    ("d", ("total += len(d.get('a')) + len(dict.keys(d))",), False),
    ("buf", ("push(buf, 1.0)",), True),
    ("buf", ("hq.heappush(buf, 1.0)",), True),
    ("buf", ("list.append(buf, 1.0)",), True),
    ("buf", ("random.shuffle(buf)",), True),
    ("buf", ("np.random.shuffle(buf)",), True),
    ("buf", ("from heapq import heappush as put{k}", "put{k}(buf, 1.0)"), True),
    ("buf", ("total += at(buf, 0) + len(list.copy(buf))",), False),
    ("buf", ("total += heappush(buf, 1.0)",), False),  # this namespace's: a reader
)


@st.composite
def _mutation_program(draw: st.DrawFn) -> tuple[str, set[str]]:
    """Source of `make(rows, d, buf)` returning a closure `f(x)`, and the
    captures its code mutates."""
    lines = ["total = 0"]
    mutated: set[str] = set()
    for k in range(draw(st.integers(1, 5))):
        container, form, mutates = draw(st.sampled_from(_MUTATION_FORMS))
        lines.extend(line.format(k=k) for line in form)
        if mutates:
            mutated.add(container)
    body = textwrap.indent("\n".join(lines), " " * 8)
    src = (
        "def make(rows, d, buf):\n"
        "    def f(x):\n"
        f"{body}\n"
        "        return x * 2.0 + total\n"
        "    return f\n"
    )
    return src, mutated


def _build_mutating(src: str) -> Any:
    import heapq
    import operator
    import random

    space: dict[str, Any] = {
        "np": np,
        "random": random,
        "hq": heapq,
        "push": heapq.heappush,
        "at": operator.getitem,
        "heappush": lambda heap, x: heap[0] * 0.0,  # named like one, reads
    }
    exec(compile(src, "<generated>", "exec"), space)
    return space["make"]


def _containers(value: Any) -> tuple[Any, Any, Any]:
    # `buf` long enough that no shuffle leaves it as it was.
    buf = [value * k for k in (1, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 12)]
    return [[value], [value * 2]], {"a": [value]}, buf


def _seeded(fn: Any, x: float) -> Any:
    """`fn(x)` with Python's and NumPy's global generators seeded alike."""
    import random

    random.seed(0)
    np.random.seed(0)
    return fn(x)


@_SETTINGS
@given(_mutation_program())
def test_generated_programs_are_refused_exactly_when_they_mutate_a_copy(
    program: tuple[str, set[str]],
):
    src, mutated = program
    make = _build_mutating(src)
    # Holding floats: rebuilt, so a call that mutates one is refused when it
    # returns, the containers intact.
    dynamic = _containers(0.5)
    before = repr(dynamic)
    if mutated:
        names = "|".join(sorted(mutated))
        with pytest.raises(
            lift.LiftError, match=rf"mutated the captured variable '({names})'"
        ):
            _seeded(lift.lift(make(*dynamic)), 1.0)
        assert repr(dynamic) == before, src
    else:
        expected = _seeded(make(*_containers(0.5)), 1.0)
        got = _seeded(lift.lift(make(*dynamic)), 1.0)
        assert math.isclose(float(got), expected, rel_tol=1e-5), src
        assert repr(dynamic) == before, src
    # Holding ints: the user's own, changed as the plain function changes its.
    own, copies = _containers(1), _containers(1)
    expected = _seeded(make(*copies), 1.0)
    got = _seeded(lift.lift(make(*own)), 1.0)
    assert math.isclose(float(got), expected, rel_tol=1e-5), src
    assert own == copies, src
