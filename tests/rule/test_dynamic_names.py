"""`dynamic=` given as names: only the named captures (and what they hold) are
dynamic besides arrays and tracers, every other Python float stays static, so
a lifted optimizer computes bitwise what plain optax computes while the named
hyperparameters are inputs of one program."""

from __future__ import annotations

import copy
import functools
import pickle
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import TraceCounter

import lift

_XS = jnp.linspace(-1.0, 1.0, 16)
_YS = 3.0 * _XS - 1.0


def _loss(params: dict[str, jax.Array]) -> jax.Array:
    return jnp.mean((params["w"] * _XS + params["b"] - _YS) ** 2)


def _step(opt: Any, params: Any, state: Any) -> tuple[Any, Any]:
    grads = jax.grad(_loss)(params)
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state


def _train(step: Any, opt: Any, steps: int = 15) -> dict[str, jax.Array]:
    """`steps` calls of a jitted `step(params, state)`, as a training loop does."""
    params = {"w": jnp.zeros(()), "b": jnp.zeros(())}
    state = opt.init(params)
    for _ in range(steps):
        params, state = step(params, state)
    return params


def _scheduled_adamw(peak: float) -> optax.GradientTransformation:
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, peak, warmup_steps=3, decay_steps=15
    )
    return optax.chain(
        optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=1e-2)
    )


def _module_level(x: Any, lr: float = 0.1, eps: float = 1e-3) -> Any:
    return x * lr + eps


# -- the sweep: bitwise plain optax, one trace ---------------------------------------


def test_sweep_with_a_schedule_is_bitwise_plain_optax_and_traces_once() -> None:
    counter = TraceCounter()

    @jax.jit
    def lifted_step(opt: Any, params: Any, state: Any) -> Any:
        counter()
        return _step(opt, params, state)

    for peak in (0.3, 0.1, 0.03):
        plain_opt = _scheduled_adamw(peak)
        plain = _train(jax.jit(functools.partial(_step, plain_opt)), plain_opt)
        # optax's `scale_by_learning_rate` keeps the schedule as `learning_rate`:
        # its floats (the peak among them) are inputs; b1, b2, eps, the weight
        # decay and the clipping norm stay constants, as in plain optax.
        opt = lift.lift(_scheduled_adamw(peak), dynamic="learning_rate")
        lifted = _train(functools.partial(lifted_step, opt), opt)
        for name in plain:
            np.testing.assert_array_equal(plain[name], lifted[name])
    assert counter.traces == 1


def test_factory_sweep_is_bitwise_plain_optax_and_traces_once() -> None:
    counter = TraceCounter()

    @jax.jit
    def lifted_step(make: Any, params: Any, state: Any) -> Any:
        counter()
        return _step(make(), params, state)

    for lr in (0.3, 0.1, 0.03):
        plain_opt = optax.adamw(lr, weight_decay=1e-2)
        plain = _train(jax.jit(functools.partial(_step, plain_opt)), plain_opt)
        make = lift.lift(
            functools.partial(optax.adamw, learning_rate=lr, weight_decay=1e-2),
            dynamic="learning_rate",
        )
        # b1, b2, eps (adamw's defaults) and the weight decay stay static.
        assert [float(v) for v in jax.tree.leaves(make)] == [
            pytest.approx(lr)  # pyright: ignore[reportUnknownMemberType]
        ]
        lifted = _train(functools.partial(lifted_step, make), make())
        for name in plain:
            np.testing.assert_array_equal(plain[name], lifted[name])
    assert counter.traces == 1


# -- which captures are dynamic ------------------------------------------------------


def _leaf_names(x: Any) -> list[str]:
    return [
        jax.tree_util.keystr(path)
        for path, _ in jax.tree_util.tree_flatten_with_path(x)[0]
    ]


def test_a_name_is_found_at_depth_and_other_floats_stay_static() -> None:
    def make(lr: float, wd: float) -> Any:
        def inner(x: Any) -> Any:
            return x * lr - wd * x

        def outer(x: Any) -> Any:
            return inner(x) + 0.5

        return outer

    f = lift.lift(make(0.1, 0.2), dynamic="lr")
    assert _leaf_names(f) == [".captures['inner'].captures['lr']"]
    assert f(jnp.asarray(2.0)) == make(0.1, 0.2)(jnp.asarray(2.0))
    # A second name; arrays stay dynamic wherever they are.
    w = jnp.ones(2)
    g = lift.lift(lambda x, scale=0.5: w * x * scale + 0.1, dynamic=("scale",))
    assert sorted(_leaf_names(g)) == [".captures['scale']", ".captures['w']"]


def test_a_named_function_makes_every_float_inside_it_dynamic() -> None:
    opt = lift.lift(_scheduled_adamw(0.1), dynamic="learning_rate")
    names = _leaf_names(opt)
    assert names and all("captures['learning_rate']" in n for n in names)
    assert not any("b1" in n or "max_norm" in n for n in names)
    # the same optimizer lifted by default has every float a leaf
    assert len(jax.tree.leaves(lift.lift(_scheduled_adamw(0.1)))) > len(names)


@pytest.mark.parametrize("first", ["named", "other"])
def test_a_function_reached_inside_and_outside_a_named_capture(first: str) -> None:
    # One function held by a named capture and by another: its floats are
    # dynamic whichever the walk meets first.
    scale = 0.5

    def helper(x: Any) -> Any:
        return x * scale

    if first == "named":

        def f(x: Any, a: Any = helper, b: Any = helper) -> Any:
            return a(x) + b(x)

        name = "a"
    else:

        def f(x: Any, a: Any = helper, b: Any = helper) -> Any:
            return a(x) + b(x)

        name = "b"
    lifted = lift.lift(f, dynamic=name)
    assert [float(v) for v in jax.tree.leaves(lifted)] == [0.5]
    assert lifted(jnp.asarray(2.0)) == 2.0


def test_changing_an_unnamed_float_retraces_a_named_one_does_not() -> None:
    counter = TraceCounter()

    def make(lr: float, eps: float) -> Any:
        @lift.jit(dynamic="lr")
        def step(w: Any) -> Any:
            counter()
            return w - lr * w + eps

        return step

    w = jnp.ones(3)
    for lr in (0.1, 0.2, 0.3):
        make(lr, 1e-3)(w)
    assert counter.traces == 1
    make(0.1, 1e-4)(w)
    assert counter.traces == 2


def test_a_lifted_subclass_takes_names() -> None:
    class Scaled(lift.Lifted[..., Any]):
        pass

    lr, eps = 0.1, 1e-3
    f = Scaled(lambda x: x * lr + eps, dynamic="lr")
    assert isinstance(f, Scaled)
    assert _leaf_names(f) == [".captures['lr']"]
    again = lift.lift(f, dynamic="eps")
    assert isinstance(again, Scaled)
    assert _leaf_names(again) == [".captures['eps']"]


def test_names_survive_copy_and_pickle() -> None:
    f = lift.lift(functools.partial(_module_level, lr=0.3), dynamic="lr")
    # The keyword and the function's default of that name, not `eps`.
    names = [".keywords['lr']", ".func.captures['lr']"]
    assert _leaf_names(f) == names
    for other in (copy.deepcopy(f), pickle.loads(pickle.dumps(f))):
        assert _leaf_names(other) == names
        assert other(jnp.asarray(2.0)) == f(jnp.asarray(2.0))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_names_survive_pickle_at_every_protocol(protocol: int) -> None:
    f = lift.lift(functools.partial(_module_level, lr=0.3), dynamic="lr")
    again = pickle.loads(pickle.dumps(f, protocol=protocol))
    assert _leaf_names(again) == _leaf_names(f)
    assert again(jnp.asarray(2.0)) == f(jnp.asarray(2.0))


def test_diff_says_an_unnamed_float_is_static() -> None:
    a = lift.lift(functools.partial(_module_level, lr=0.3, eps=1e-3), dynamic="lr")
    b = lift.lift(functools.partial(_module_level, lr=0.3, eps=1e-4), dynamic="lr")
    said = lift.diff(a, b)
    assert said is not None
    assert "not named in `dynamic=` (dynamic=('lr',))" in said


def test_the_predicate_form_still_works() -> None:
    w, lr = jnp.ones(2), 0.1
    f = lift.lift(lambda x: w * x * lr, dynamic=lambda v: isinstance(v, jax.Array))
    assert _leaf_names(f) == [".captures['w']"]
    g = lift.lift(lambda x: w * x * lr, dynamic=lambda v: isinstance(v, float))
    assert _leaf_names(g) == [".captures['lr']"]


# -- refusals ------------------------------------------------------------------------


def test_an_unknown_name_lists_the_names_and_the_nearest() -> None:
    lr, wd = 0.1, 0.01
    with pytest.raises(
        lift.LiftError,
        match=r"dynamic=\('lrr',\)\): no captured variable is called 'lrr' \(did "
        r"you mean 'lr'\?\)\.\nCaptured variables: 'lr', 'wd'",
    ):
        lift.lift(lambda x: x * lr + wd, dynamic="lrr")


def test_an_unknown_name_on_a_built_optimizer_points_to_the_factory() -> None:
    with pytest.raises(
        lift.LiftError,
        match=r"(?s)no captured variable is called 'learning_rate'.*'step_size'.*"
        r"functools\.partial\(constructor, learning_rate=\.\.\.\), "
        r"dynamic='learning_rate'\)",
    ):
        lift.lift(optax.adam(0.1), dynamic="learning_rate")


def test_a_name_both_static_and_dynamic_is_refused() -> None:
    lr = 0.1
    with pytest.raises(lift.LiftError, match=r"'lr' cannot be both static and dynamic"):
        lift.lift(lambda x: x * lr, static="lr", dynamic="lr")
    with pytest.raises(lift.LiftError, match=r"'lr' cannot be both static and dynamic"):
        lift.jit(lambda x: x * lr, static=("lr",), dynamic=("lr",))(1.0)


def test_names_that_are_not_strings_are_refused() -> None:
    lr = 0.1
    with pytest.raises(lift.LiftError, match=r"`dynamic=` names captured variables"):
        lift.lift(lambda x: x * lr, dynamic=1)  # pyright: ignore[reportArgumentType, reportCallIssue]


def _checked_rate(peak: Any) -> Any:
    return 0.0 if peak == 0.0 else 1.0 / peak


def _make_rate(peak: float) -> Any:
    return _checked_rate(peak)  # the branch is in a callee: seen when it runs


def test_a_branch_on_a_named_capture_says_to_leave_it_out_of_dynamic() -> None:
    make = lift.lift(functools.partial(_make_rate, peak=0.1), dynamic="peak")
    with pytest.raises(
        lift.LiftError,
        match=r"uses the captured variable 'peak' in Python control flow .*\n"
        r"Fix: keep it static by leaving 'peak' out of `dynamic=` \(each new "
        r"value then compiles anew\), or replace the Python branch",
    ):
        jax.jit(lambda make: make())(make)


def _branches_on(b: float) -> Any:
    def f(x: Any) -> Any:
        if b != 1.0:  # optax's sm3 does this with its b2
            return x * b
        return x

    return f


def test_a_named_capture_the_code_branches_on_directly_is_dynamic_as_asked() -> None:
    # Found by an adversary: branch analysis kept a named capture static, so a
    # sweep compiled once per value and `lift.diff` blamed `dynamic=`.
    a = lift.lift(_branches_on(0.5), dynamic="b")
    b = lift.lift(_branches_on(0.7), dynamic="b")
    (leaf,) = jax.tree_util.tree_leaves(a)
    assert isinstance(leaf, jax.Array)
    assert lift.diff(a, b) is None
    assert float(a(2.0)) == 1.0  # eagerly the value is concrete: the branch runs
    with pytest.raises(
        lift.LiftError,
        match=r"uses the captured variable 'b' in Python control flow .*\n"
        r"Fix: keep it static by leaving 'b' out of `dynamic=`",
    ):
        jax.jit(lambda f, x: f(x))(a, 2.0)
    # Not named, it stays static as before: the branch runs while tracing.
    plain = lift.lift(_branches_on(0.5))
    assert jax.tree_util.tree_leaves(plain) == []


# -- a named int or bool -----------------------------------------------------------


def _warmup(warmup_steps: int) -> Any:
    return lambda step: jnp.minimum(1.0, step / warmup_steps)


def test_an_int_named_in_dynamic_is_an_integer_leaf_and_a_sweep_traces_once() -> None:
    lifted = lift.lift(_warmup(10), dynamic="warmup_steps")
    (leaf,) = jax.tree_util.tree_leaves(lifted)
    assert jnp.issubdtype(leaf.dtype, jnp.integer)
    counter = TraceCounter()
    run = counter.jit(lambda g, s: g(s))
    for steps in (10, 20, 40):
        out = run(lift.lift(_warmup(steps), dynamic="warmup_steps"), 5.0)
        assert float(out) == pytest.approx(5.0 / steps)
    assert counter.traces == 1
    # Unnamed, it stays static as before: one program per value.
    assert jax.tree_util.tree_leaves(lift.lift(_warmup(10))) == []


def test_a_bool_named_in_dynamic_is_a_boolean_leaf() -> None:
    def make(flag: bool) -> Any:
        return lambda x: jnp.where(flag, x, -x)

    (leaf,) = jax.tree_util.tree_leaves(lift.lift(make(True), dynamic="flag"))
    assert leaf.dtype == jnp.bool_
    run = jax.jit(lambda g, x: g(x))
    assert float(run(lift.lift(make(False), dynamic="flag"), 1.0)) == -1.0


def test_a_named_int_the_code_needs_concrete_is_a_lifterror_naming_it() -> None:
    def make(n: int) -> Any:
        return lambda x: jnp.zeros((n,)) + x

    lifted = lift.lift(make(3), dynamic="n")
    assert lifted(1.0).shape == (3,)  # eagerly its value is known
    with pytest.raises(
        lift.LiftError, match=r"(?s)'n' where a concrete value.*out of `dynamic=`"
    ):
        jax.jit(lambda g, x: g(x))(lifted, 1.0)


def test_a_named_int_too_wide_for_its_leaf_is_a_lifterror_naming_it() -> None:
    def make(n: int) -> Any:
        return lambda x: x + n

    with (
        jax.enable_x64(False),
        pytest.raises(
            lift.LiftError,
            match=r"(?s)make.<locals>.<lambda> \(.*test_dynamic_names.py:\d+\) "
            r"captures variable 'n' = 1099511627776, which `dynamic=` makes a leaf: "
            r"an int leaf is an int32 array.*"
            r"Fix: enable 64-bit values .*keep it static",
        ),
    ):
        lift.lift(make(2**40), dynamic="n")
    with jax.enable_x64(True):
        lifted = lift.lift(make(2**40), dynamic="n")
        assert jax.tree_util.tree_leaves(lifted)[0].dtype == jnp.int64
        assert int(lifted(1)) == 2**40 + 1
        with pytest.raises(lift.LiftError, match=r"int64 array"):
            lift.lift(make(2**70), dynamic="n")
    assert int(lift.lift(make(-(2**31)), dynamic="n")(0)) == -(2**31)
    with (
        jax.enable_x64(False),
        pytest.raises(lift.LiftError, match=r"'n' = 2147483648"),
    ):
        lift.lift(make(2**31), dynamic=lambda v: isinstance(v, int))
