"""How a `Lifted` shows itself to people: `repr`, treescope, the treedef
JAX prints when it explains a cache miss, and key paths followed by hand."""

from __future__ import annotations

import functools
import io
import logging
import sys
from typing import Any

import jax
import jax.numpy as jnp
import optax
import pytest
import treescope

import lift


def test_repr_shows_an_optimizers_learning_rate() -> None:
    opt = lift.lift(optax.adam(1e-3))
    text = repr(opt)
    # Dynamic captures: dtype, shape and (for a scalar) the value as float32 prints.
    assert "step_size=float32[]=-0.001" in text
    assert "b1=float32[]=0.9," in text
    # Static captures: their value alone.
    assert "nesterov=False" in text
    assert "scale_by_adam.<locals>.update_fn(" in text
    assert "0x" not in text


def test_static_and_dynamic_floats_are_told_apart() -> None:
    def make(lr: float, n: float) -> Any:
        return lift.lift(lambda x: x * lr * n, static=("n",))

    text = repr(make(0.5, 0.5))
    assert "lr=float32[]=0.5" in text
    assert "n=0.5" in text and "n=float32" not in text


def test_a_rebound_float_says_why_it_is_static() -> None:
    """SPEC 1: a scalar the code rebinds stays static; `repr` says why, as
    `lift.diff` does, and only of it."""

    def make(count: float, lr: float) -> Any:
        def step(x: Any) -> Any:
            nonlocal count
            count = count + 1.0
            return x * lr * count

        return step

    a, b = lift.lift(make(1.0, 0.1)), lift.lift(make(2.0, 0.1))
    why = "static because the code rebinds it (`nonlocal count`): a leaf cannot be rebound"
    assert f"count=1.0 ({why})" in repr(a)
    assert "lr=float32[]=0.1)" in repr(a)
    assert why in str(lift.diff(a, b))


def test_traced_captures_show_dtype_and_shape_only() -> None:
    shown: list[str] = []

    @jax.jit
    def run(f: Any) -> Any:
        shown.append(repr(f))
        return f(1.0)

    def make(lr: float) -> Any:
        return lift.lift(lambda x: x * lr)

    run(make(0.5))
    assert shown == [f"Lifted({make.__qualname__}.<locals>.<lambda>(lr=float32[]))"]


def test_arrays_show_dtype_and_shape() -> None:
    w = jnp.ones((2, 3), jnp.bfloat16)
    f = lift.lift(lambda x: x @ w)
    assert (
        repr(f)
        == "Lifted(test_arrays_show_dtype_and_shape.<locals>.<lambda>(w=bfloat16[2,3]))"
    )


def test_long_containers_are_cut_with_a_count() -> None:
    xs = tuple(float(i) for i in range(100))
    names = {f"k{i}": i for i in range(30)}
    f = lift.lift(lambda x: x + sum(xs) + len(names))
    text = repr(f)
    assert "float32[]=15.0, ...(84 more))" in text
    assert "'k15': 15, ...(14 more)}" in text  # insertion order kept
    assert len(text) < 1200


def test_nested_functions_are_depth_limited() -> None:
    def chain(n: int) -> Any:
        f: Any = lambda x: x
        for i in range(n):
            f = (lambda g, a: lambda x: g(x) * a)(f, float(i))
        return f

    text = repr(lift.lift(chain(10)))
    assert text.count("a=float32[]") == 4  # the root and three levels below it
    assert text.endswith(
        "a=float32[]=6.0, g=<"
        + f"{chain.__qualname__}.<locals>.<lambda>.<locals>.<lambda>>)))))"
    )


def test_statics_show_names_not_addresses() -> None:
    class Config:
        pass

    config = Config()
    compiled = jax.jit(jnp.sin)
    f = lift.lift(lambda x: compiled(x) if config else x)
    text = repr(f)
    assert "compiled=<PjitFunction of <PjitFunction of <function sin>>>" in text
    assert ".test_statics_show_names_not_addresses.<locals>.Config object>" in text
    assert "0x" not in text


def test_repr_of_ten_thousand_nested_closures() -> None:
    # Iterative and bounded: no RecursionError at the default limit, a short text.
    def chain(n: int) -> Any:
        f: Any = lambda x: x
        for i in range(n):
            f = (lambda g, a, k: lambda x: g(x) * a + k)(f, float(i), i)
        return f

    f = lift.lift(chain(10_000))
    assert sys.getrecursionlimit() <= 10_000
    assert len(repr(f)) < 1000
    text = repr(jax.tree_util.tree_structure(f))
    assert "nodes=40001, leaves=10000, static: k=9999, k=9998" in text
    assert "more) #" in text
    assert len(text) < 1000 + 3 * 10_000  # JAX prints one `*` per leaf


def test_treescope_renders_names_and_values() -> None:
    opt = lift.lift(optax.adam(1e-3))
    text = treescope.render_to_text(opt)
    assert "__qualname__='scale_by_adam.<locals>.update_fn'" in text
    assert "'step_size': <jax.Array(-0.001, dtype=float32" in text
    assert "'nesterov': False" in text
    assert "0x" not in text
    html = treescope.render_to_html(opt, compressed=False)
    assert "scale_by_adam.&lt;locals&gt;.update_fn" in html
    assert "-0.001" in html
    assert "0x" not in html


def test_treescope_on_a_partial_and_a_recursive_function() -> None:

    def f(x: Any, a: Any, *, k: float = 2.0) -> Any:
        return x * a * k

    text = treescope.render_to_text(lift.lift(functools.partial(f, 1.0, k=3.0)))
    assert "args=(<jax.Array(1., dtype=float32" in text
    assert "keywords={'k': <jax.Array(3., dtype=float32" in text
    assert "func=Lifted(" in text

    def make(scale: float) -> Any:
        def fact(n: int) -> Any:
            return scale if n == 0 else n * fact(n - 1)

        return fact

    text = treescope.render_to_text(lift.lift(make(2.0)))  # ends: depth-limited
    assert ".<locals>.make.<locals>.fact>)" in text


def test_explain_cache_misses_shows_the_static_that_differs() -> None:
    def make(lr: float, steps: int) -> Any:
        return lift.lift(lambda x: x * lr / steps)

    traces = 0

    @jax.jit
    def run(f: Any, x: Any) -> Any:
        nonlocal traces
        traces += 1
        return f(x)

    log = io.StringIO()
    handler = logging.StreamHandler(log)
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    before = jax.config.jax_explain_cache_misses, jax.config.jax_check_tracer_leaks
    jax.config.update("jax_explain_cache_misses", True)
    # JAX 0.8.0 explains nothing while it checks for leaked tracers.
    jax.config.update("jax_check_tracer_leaks", False)
    try:
        run(make(0.1, 10), 1.0)
        run(make(0.2, 10), 1.0)  # dynamic: no miss
        run(make(0.1, 20), 1.0)
    finally:
        jax.config.update("jax_explain_cache_misses", before[0])
        jax.config.update("jax_check_tracer_leaks", before[1])
        logger.removeHandler(handler)
    assert traces == 2
    text = log.getvalue()
    assert "static: steps=20 #" in text
    assert "static: steps=10 #" in text


def test_skeleton_repr_tells_static_values_apart() -> None:
    a = lift.lift(optax.adam(1e-3))
    b = lift.lift(optax.adam(1e-3, nesterov=True))
    sa, sb = (str(jax.tree_util.tree_structure(x)) for x in (a, b))
    assert sa != sb
    assert "static: nesterov=False" in sa
    assert "static: nesterov=True" in sb


def test_capture_path_is_public() -> None:
    opt = lift.lift(optax.sgd(0.1))
    [(path, _)] = jax.tree_util.tree_flatten_with_path(opt)[0]
    assert isinstance(path[-1], lift.CapturePath)
    assert (
        str(path[-1])
        == ".captures['update_fns'][1].captures['tx'].update.captures['step_size']"
    )
    assert lift.CapturePath.__doc__


OPTIMIZERS = {
    "chain(clip, adamw)": lambda: optax.chain(optax.clip(1.0), optax.adamw(1e-3)),
    "adam(schedule)": lambda: optax.adam(optax.exponential_decay(1e-3, 100, 0.9)),
    "warmup_cosine_decay_schedule": lambda: optax.warmup_cosine_decay_schedule(
        0.0, 1e-3, 10, 100
    ),
    "inject_hyperparams": lambda: optax.inject_hyperparams(optax.adam)(
        learning_rate=1e-3
    ),
    "lookahead": lambda: optax.lookahead(optax.sgd(0.1), 5, 0.5),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_key_paths_can_be_followed_by_hand(name: str) -> None:
    opt = lift.lift(OPTIMIZERS[name]())
    pairs = jax.tree_util.tree_flatten_with_path(opt)[0]
    assert len(pairs) >= 2
    for path, leaf in pairs:
        reached = eval("opt" + jax.tree_util.keystr(path), {"opt": opt})
        assert reached is leaf, jax.tree_util.keystr(path)


def test_key_paths_of_a_partial_can_be_followed() -> None:
    def f(x: Any, a: Any, *, k: float = 2.0) -> Any:
        return x * a * k

    p = lift.lift(functools.partial(f, 1.0, k=3.0))
    keys = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(p)[0]:
        keys.append(jax.tree_util.keystr(path))
        assert eval("p" + keys[-1], {"p": p}) is leaf
    assert sorted(keys) == [".args[0]", ".func.captures['k']", ".keywords['k']"]


def test_captured_functions_come_back_lifted_and_callable() -> None:
    def make(lr: float) -> Any:
        def inner(x: Any) -> Any:
            return x * lr

        return lambda x: inner(x) + 1

    f = lift.lift(make(2.0))
    inner = f.captures["inner"]
    assert lift.is_lifted(inner)
    assert inner(3.0) == 6.0
    assert inner.captures["lr"] is jax.tree_util.tree_leaves(f)[0]


def test_unknown_attributes_are_attribute_errors() -> None:
    f = lift.lift(lambda x: x)
    assert not hasattr(f, "args")
    assert not hasattr(f, "_nothing")
    with pytest.raises(AttributeError, match="'Lifted' object has no attribute 'fun'"):
        f.fun  # noqa: B018


def test_repr_of_a_converted_float_prints_as_float32_prints_it() -> None:
    # Once flattened, a captured 0.1 is a float32 array: shown as `0.1`, not as
    # the Python float it widens to (`0.10000000149011612`).
    def make(lr: float) -> Any:
        return lift.lift(lambda g: -lr * g)

    f = make(0.1)
    jax.tree.leaves(f)
    assert repr(f).endswith("(lr=float32[]=0.1))")


def test_repr_of_an_in_axes_prefix_shows_its_axes() -> None:
    def make(lr: float, b: float) -> Any:
        return lift.lift(lambda g: -lr * g + b)

    f = make(0.1, 0.2)
    axes = jax.tree.map(lambda _: None, f)
    assert repr(axes).endswith("(b=None, lr=None))")
    assert repr(jax.tree.map(lambda _: 0, f)).endswith("(b=0, lr=0))")


def test_a_cache_miss_explanation_is_short_and_leads_with_what_differs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # JAX prints the treedef's static data (the skeleton's repr) of both keys:
    # variables by name, those not None first, equal ones counted once.
    @jax.jit
    def step(opt: Any, p: jax.Array) -> Any:
        return opt.update(p, opt.init(p), p)[0]

    p = jnp.ones(3)
    # As a user sees it: under leak checking jax 0.8.0 bypasses its cache and
    # explains no miss.
    with jax.check_tracer_leaks(False):
        step(lift.lift(optax.adam(0.1)), p)
        jax.config.update("jax_explain_cache_misses", True)
        try:
            with caplog.at_level(logging.WARNING):
                step(lift.lift(optax.adam(0.1, nesterov=True)), p)
        finally:
            jax.config.update("jax_explain_cache_misses", False)
    [line] = [r for r in caplog.text.splitlines() if "pytree metadata" in r]
    assert "static: nesterov=True, params=None (x5), mu_dtype=None #" in line
    assert "static: nesterov=False, params=None (x5), mu_dtype=None #" in line
    assert len(line) < 600  # was about 1 400 characters


def _chain(depth: int, leaf: float) -> Any:
    """A closure `depth` functions deep, the innermost capturing `leaf`."""
    f = lambda x: leaf * x
    for _ in range(depth):
        f = (lambda g: lambda x: g(x))(f)
    return f


def test_a_deep_capture_path_elides_its_middle_and_compares_by_entries():
    # 42 entries: the first and last 16 kept around an `Elided` one.
    flatten = jax.tree_util.tree_flatten_with_path
    ((path, leaf),) = flatten(lift.lift(_chain(20, 0.5)))[0]
    ((again, _),) = flatten(lift.lift(_chain(20, 0.25)))[0]
    (capture,) = path
    g = ".captures['g']"
    assert str(capture) == f"{g * 8}...(10 more)...{g * 7}.captures['leaf']"
    assert repr(capture) == f"CapturePath({capture})"
    assert "Elided(10)" in repr(capture.entries)
    assert again == path and hash(again[0]) == hash(capture)
    assert float(leaf) == 0.5


def test_a_nested_function_shows_its_first_twelve_captures_and_a_count() -> None:
    def inner(x, a0=0.0, a1=1.0, a2=2.0, a3=3.0, a4=4.0, a5=5.0, a6=6.0,
              a7=7.0, a8=8.0, a9=9.0, a10=10.0, a11=11.0, a12=12.0, a13=13.0):  # fmt: skip
        return x

    text = repr(lift.lift(lambda x: inner(x)))
    assert "a11=float32[]=11.0, ...(2 more))" in text
