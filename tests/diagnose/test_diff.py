"""`lift.diff`: why two pytrees compile separately, in the user's terms."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import struct
from flax.training import train_state
from helpers import several_devices

import lift

HERE = __file__


def make(lr: Any, steps: Any, w: Any = None) -> Any:
    w = jnp.ones(2) if w is None else w

    def inner(x: Any) -> Any:
        return x / steps

    return lift.lift(lambda x: inner(x) * lr * w)


def _line(fn: Any) -> str:
    return f"{HERE}:{fn.__code__.co_firstlineno}"


INNER_AT = f"{HERE}:{make.__code__.co_firstlineno + 3}"


def test_none_when_only_dynamic_values_differ() -> None:
    assert lift.diff(make(0.1, 10), make(0.2, 10)) is None


def test_names_static_difference_by_path_variable_values_and_reason() -> None:
    text = lift.diff(make(0.1, 10), make(0.1, 20))
    assert text == (
        ".captures['inner'].captures['steps']: steps = 10 vs 20, static because it "
        "is an int, not a float or array (in make.<locals>.inner at "
        f"{INNER_AT})"
    )


def test_a_leaf_of_another_shape_is_a_difference() -> None:
    # SPEC: `None` exactly when `jax.jit` reuses one program; a leaf of another
    # shape, dtype or weak type retraces, and is said by path and both types.
    a, b = make(0.1, 10, jnp.ones(2)), make(0.1, 10, jnp.ones(3))
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    text = lift.diff(a, b)
    assert text is not None
    assert ": a leaf of type float32[2] in one, float32[3] in the other" in text


def test_names_static_versus_dynamic() -> None:
    text = lift.diff(make(0.1, 10), make(0.1, 10.0))
    assert text == (
        ".captures['inner'].captures['steps']: steps is static 10 (it is an int, "
        "not a float or array) in one, a leaf (dynamic) in the other (in "
        f"make.<locals>.inner at {INNER_AT})"
    )


def test_branch_detected_float_names_the_if() -> None:
    def make_branchy(b2: float) -> Any:
        def f(x: Any) -> Any:
            if b2 != 1.0:
                return x * b2
            return x

        return lift.lift(f)

    a, b = make_branchy(1.0), make_branchy(0.9)
    assert jax.tree_util.tree_structure(a) != jax.tree_util.tree_structure(b)
    text = lift.diff(a, b)
    branch_line = make_branchy.__code__.co_firstlineno + 2
    assert text == (
        f".captures['b2']: b2 = 1.0 vs 0.9, static because it is used in `if` at "
        f"{HERE}:{branch_line} (a traced value could not run there) (in "
        f"{make_branchy.__qualname__}.<locals>.f at {HERE}:{branch_line - 1})"
    )


def test_declared_static_says_so() -> None:
    def scaled(n: float) -> Any:
        return lift.lift(lambda x: x * n, static=("n",))

    text = lift.diff(scaled(0.5), scaled(0.25))
    assert text is not None
    assert text.startswith(
        ".captures['n']: n = 0.5 vs 0.25, static because you declared it static "
        "(static=('n',))"
    )


def test_unhashable_static_compared_by_identity() -> None:
    def holding(obj: Any) -> Any:
        return lift.lift(lambda x: x if obj else -x)

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

    text = lift.diff(holding(Unhashable()), holding(Unhashable()))
    assert text is not None
    assert text.startswith(".captures['obj']: obj = <test_diff.test_unhashable_")
    assert "compared by identity" in text


def test_a_captured_set_is_compared_by_its_contents() -> None:
    def holding(obj: Any) -> Any:
        return lift.lift(lambda x: x if obj else -x)

    # The user's own set, keyed by what it holds: equal sets share a program.
    assert lift.diff(holding({1}), holding({1})) is None
    text = lift.diff(holding({1}), holding({2}))
    assert text is not None
    assert text.startswith(
        ".captures['obj']: obj = {1} vs {2}, static because it is a set"
    )
    text = lift.diff(holding({"b", "a"}), holding({"c"}))
    assert text is not None
    assert text.startswith(".captures['obj']: obj = {'a', 'b'} vs {'c'}")  # sorted


def test_different_code_names_both_functions() -> None:
    a = lift.lift(lambda x: x + 1)
    b = lift.lift(lambda x: x + 2)
    text = lift.diff(a, b)
    line = test_different_code_names_both_functions.__code__.co_firstlineno + 1
    name = "test_different_code_names_both_functions.<locals>.<lambda>"
    assert text == (
        f"two different functions: {name} ({HERE}:{line}) vs {name} ({HERE}:{line + 1})"
    )


def test_optimizers_differ_by_path_with_init_and_update_prefix() -> None:
    a = lift.lift(optax.adam(0.1))
    assert lift.diff(a, lift.lift(optax.adam(0.2))) is None
    text = lift.diff(a, lift.lift(optax.adam(0.1, nesterov=True)))
    assert text is not None
    [line] = text.splitlines()
    assert line.startswith(
        ".update.captures['update_fns'][0].captures['tx'].update.captures['nesterov']:"
        " nesterov = False vs True, static because it is a bool, not a float or array"
        " (in scale_by_adam.<locals>.update_fn at "
    )
    # The path the diff prints can be followed by hand to the capture.
    path = line.split(": ")[0]
    assert eval("a" + path, {"a": a}) is False


def test_different_optimizers_in_user_terms() -> None:
    text = lift.diff(lift.lift(optax.adam(0.1)), lift.lift(optax.sgd(0.1)))
    assert text is not None
    first = text.splitlines()[0]
    assert first.startswith(
        ".init.captures['init_fns'][0] is a different function: "
        "scale_by_adam.<locals>.init_fn ("
    )
    assert " vs init_empty_state (" in first
    for word in ("FunctionNode", "CellNode", "nodes", "graph"):
        assert word not in text


def test_function_versus_partial() -> None:
    def f(x: Any, k: Any = 1.0) -> Any:
        return x * k

    def g(x: Any) -> Any:
        return f(x)

    def h(x: Any) -> Any:
        return f(x)

    def make_with(fn: Any) -> Any:
        return lift.lift(lambda x: fn(x))

    text = lift.diff(make_with(g), make_with(functools.partial(f, k=2.0)))
    assert text is not None
    assert text.startswith(
        f".captures['fn']: a function ({g.__qualname__} ({_line(g)})) in one, a "
        f"functools.partial (functools.partial({f.__qualname__})) in the other"
    )
    assert lift.diff(make_with(g), make_with(h)) == (
        f".captures['fn'] is a different function: {g.__qualname__} ({_line(g)}) vs "
        f"{h.__qualname__} ({_line(h)})"
    )


def test_inside_any_pytrees() -> None:
    assert lift.diff((make(0.1, 1),), [make(0.1, 1)]) == (
        "a tuple of 1 in one, a list of 1 in the other"
    )
    assert lift.diff({"a": 1.0}, {"b": 1.0}) == (
        "the dicts' keys differ: the key 'a' is in one only, the key 'b' is in the "
        "other only"
    )
    assert lift.diff({"a": [1.0, 2.0]}, {"a": [1.0]}) == (
        "['a']: a list of 2 in one, a list of 1 in the other"
    )
    assert (
        lift.diff({"a": None}, {"a": 1.0}) == "['a']: None in one, a float in the other"
    )
    text = lift.diff({"opt": make(0.1, 1)}, {"opt": make(0.1, 2)})
    assert text is not None
    assert text.startswith(
        "['opt'].captures['inner'].captures['steps']: steps = 1 vs 2"
    )
    assert lift.diff({"a": jnp.ones(2)}, {"a": jnp.ones(3)}) == (
        "['a']: a leaf of type float32[2] in one, float32[3] in the other (jax.jit "
        "compiles a program per leaf shape, dtype and weak type)"
    )
    assert lift.diff({"a": jnp.ones(2)}, {"a": jnp.zeros(2)}) is None


class _State(train_state.TrainState):
    pass


def _params() -> Any:
    return {"w": jnp.ones(3)}


def test_flax_train_state_with_a_lifted_tx_names_the_static_field() -> None:
    a = train_state.TrainState.create(
        apply_fn=None, params=_params(), tx=lift.lift(optax.adam(0.1))
    )
    b = train_state.TrainState.create(
        apply_fn=None, params=_params(), tx=lift.lift(optax.adam(0.2))
    )
    # What the user sees: one compile per rate, although the rate is dynamic.
    traces = 0

    @jax.jit
    def step(state: Any) -> Any:
        nonlocal traces
        traces += 1
        return state.params

    step(a)
    step(b)
    assert traces == 2
    text = lift.diff(a, b)
    assert text is not None
    assert text.startswith(
        ".tx: a Lifted (chain.<locals>.init_fn), a Lifted (chain.<locals>.update_fn)"
        " are held in the static metadata of TrainState (field 'tx' is not a pytree "
        "field)"
    )
    assert (
        "Fix: make `tx` a pytree field (flax: `struct.field(pytree_node=True)`" in text
    )
    assert "or pass the optimizer to the jitted function as an argument." in text


def test_flax_train_state_with_tx_as_a_pytree_field_compiles_once() -> None:
    class State(train_state.TrainState):
        tx: Any = struct.field(pytree_node=True)

    a = State.create(apply_fn=None, params=_params(), tx=lift.lift(optax.adam(0.1)))
    b = State.create(apply_fn=None, params=_params(), tx=lift.lift(optax.adam(0.2)))
    assert lift.diff(a, b) is None
    c = State.create(
        apply_fn=None, params=_params(), tx=lift.lift(optax.adam(0.1, nesterov=True))
    )
    text = lift.diff(a, c)
    assert text is not None
    assert text.startswith(
        ".tx.update.captures['update_fns'][0].captures['tx'].update.captures["
        "'nesterov']: nesterov = False vs True"
    )


# equinox warns too: a `Lifted` holds arrays.
@pytest.mark.filterwarnings("ignore:A JAX array is being set as static:UserWarning")
def test_equinox_static_field_holding_a_function() -> None:
    class Model(eqx.Module):
        fn: Any = eqx.field(static=True)

    def scaled(lr: float) -> Any:
        return lift.lift(lambda x: x * lr)

    text = lift.diff(Model(scaled(0.1)), Model(scaled(0.2)))
    assert text is not None
    assert text.startswith(
        f".fn: a Lifted ({scaled.__qualname__}.<locals>.<lambda>) is held in the "
        "static metadata of Model (field 'fn' is not a pytree field)"
    )
    assert "equinox: drop `static=True`" in text
    assert "pass the function to the jitted function" in text

    class Dynamic(eqx.Module):
        fn: Any

    assert lift.diff(Dynamic(scaled(0.1)), Dynamic(scaled(0.2))) is None


def test_plain_closures_in_static_metadata() -> None:
    class Model(eqx.Module):
        fn: Any = eqx.field(static=True)

    def scaled(lr: float) -> Any:
        return lambda x: x * lr

    text = lift.diff(Model(scaled(0.1)), Model(scaled(0.2)))
    assert text is not None
    assert text.startswith(
        f".fn: the function {scaled.__qualname__}.<locals>.<lambda> is held in the "
        "static metadata of Model"
    )


def test_structure_difference_inside_a_capture() -> None:
    def holding(xs: Any) -> Any:
        return lift.lift(lambda x: x + sum(xs))

    # Said where the values part, as for any pytree: the capture is walked
    # into as the user's value was.
    text = lift.diff(holding([1.0, 2.0]), holding([1.0]))
    assert text == ".captures['xs']: a list of 2 in one, a list of 1 in the other"
    text = lift.diff(
        holding({"a": [1.0, 2.0], "b": 1.0}), holding({"a": [1.0], "b": 1.0})
    )
    assert text == ".captures['xs']['a']: a list of 2 in one, a list of 1 in the other"


def test_a_lifted_function_captured_by_another_is_walked_into() -> None:
    # It used to be said as both captures' treedefs, cut at 60 characters.
    def calling(g: Any) -> Any:
        return lift.lift(lambda x: g(x))

    text = lift.diff(calling(make(0.1, 1)), calling(make(0.1, 2)))
    assert text == (
        ".captures['g'].captures['inner'].captures['steps']: steps = 1 vs 2, static "
        f"because it is an int, not a float or array (in make.<locals>.inner at "
        f"{INNER_AT})"
    )


def test_unflattenable_input_is_refused_by_name() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(
        lift.LiftError, match=r"diff\(\) got a list that contains itself"
    ):
        lift.diff(loop, loop)


def test_deep_nesting_is_walked_iteratively_and_paths_stay_bounded() -> None:
    def chain(n: int, last: int) -> Any:
        f: Any = lambda x: x
        for i in range(n):
            f = (lambda g, k: lambda x: g(x) + k)(f, i if i else last)
        return f

    text = lift.diff(lift.lift(chain(3000, 0)), lift.lift(chain(3000, 5)))
    assert text is not None
    [line] = text.splitlines()
    assert line.startswith(".captures['g'].captures['g']")
    assert " ... " in line
    assert (
        ".captures['g'].captures['k']: k = 0 vs 5, static because it is an int" in line
    )
    assert len(line) < 1300


# -- static data compared with `==`, as JAX compares it --------------------------------


class _Apply:
    def apply(self, x: Any) -> Any:
        return x


class _Static(eqx.Module):
    held: Any = eqx.field(static=True)


def test_equal_bound_methods_in_static_metadata_are_not_blamed() -> None:
    # `model.apply` read twice is two method objects, equal by `==`.
    model = _Apply()
    assert model.apply is not model.apply
    a, b = _Static(model.apply), _Static(model.apply)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    assert lift.diff(a, b) is None
    text = lift.diff(a, _Static(_Apply().apply))
    assert text is not None
    assert text.startswith(
        ".held: the function _Apply.apply is held in the static metadata of _Static "
        "(field 'held' is not a pytree field), which JAX compares with `==`: a "
        "function is equal only to itself, so every new one compiles anew, whatever "
        "it captures; a bound method is equal to one of the same function bound to "
        "the same object.\n"
    )


def test_dict_keys_present_in_one_only_are_named() -> None:
    assert lift.diff({"a": 1.0, "b": 2.0}, {"a": 1.0}) == (
        "the dicts' keys differ: the key 'b' is in one only"
    )
    assert lift.diff({"a": 1.0}, {"a": 1.0, "b": 2.0, "c": 3.0}) == (
        "the dicts' keys differ: the keys 'b', 'c' are in the other only"
    )


class Opaque:
    """No `__eq__` of its own: compared by identity."""


class ArrayEq:
    def __init__(self, v: Any) -> None:
        self.v = v

    def __eq__(self, other: object) -> Any:
        return jnp.asarray([1, 2]) == jnp.asarray([1, 3])

    __hash__ = object.__hash__


class RaisingEq:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("cannot compare")

    __hash__ = object.__hash__


def test_an_object_without_its_own_eq_is_said_compared_by_identity() -> None:
    text = lift.diff(_Static(Opaque()), _Static(Opaque()))
    assert text is not None
    assert text.startswith("_Static's static metadata differs: ")
    assert text.endswith(
        "; an Opaque has no `__eq__` of its own: compared by identity, so each new "
        "one compiles anew"
    )

    def holding(o: Any) -> Any:
        return lift.lift(lambda x: x if o else -x)

    text = lift.diff(holding(Opaque()), holding(Opaque()))
    assert text is not None
    assert text.startswith(".captures['o']: o = ")
    assert (
        "static because it is an Opaque, not a float or array, with no `__eq__` of "
        "its own: compared by identity, so each new object compiles anew (in "
    ) in text
    one = Opaque()
    assert lift.diff(holding(one), holding(one)) is None


@pytest.mark.parametrize(
    ("held", "why"),
    [
        (
            ArrayEq,
            "an ArrayEq's `==` answers with an array, not True or False: taken as "
            "different",
        ),
        (
            lambda _: RaisingEq(),
            "comparing a RaisingEq with `==` raised RuntimeError: taken as different",
        ),
    ],
)
def test_an_eq_that_cannot_answer_is_a_difference_with_its_reason(
    held: Any, why: str
) -> None:
    # JAX itself raises comparing such treedefs; diff says why instead.
    a, b = _Static(held(1)), _Static(held(1))
    text = lift.diff(a, b)
    assert text is not None and text.startswith("_Static's static metadata differs")
    assert text.endswith(f"; {why}")

    def holding(o: Any) -> Any:
        return lift.lift(lambda x: x if o else -x)

    text = lift.diff(holding(held(1)), holding(held(1)))
    assert text is not None
    assert f"; {why} (in " in text


# -- `None` exactly when `jax.jit` serves both with one program ----------------------


def _holding(d: Any) -> Any:
    def f(x):
        return x * len(d)

    return lift.lift(f)


_PAIRS = {
    "adam, two float learning rates": (
        lambda: lift.lift(optax.adam(0.1)),
        lambda: lift.lift(optax.adam(0.2)),
    ),
    "adam, a float and a float32 learning rate": (
        lambda: lift.lift(optax.adam(0.1)),
        lambda: lift.lift(optax.adam(np.float32(0.2))),
    ),
    "adam, a float and a float16 learning rate": (
        lambda: lift.lift(optax.adam(0.1)),
        lambda: lift.lift(optax.adam(jnp.float16(0.2))),
    ),
    "a captured dict in another order": (
        lambda: _holding({"a": 1, "b": 2}),
        lambda: _holding({"b": 2, "a": 1}),
    ),
    "plain dicts in another order": (
        lambda: {"a": 1.0, "b": jnp.ones(2)},
        lambda: {"b": jnp.ones(2), "a": 2.0},
    ),
    "a static int": (lambda: make(0.1, 1), lambda: make(0.1, 2)),
    "a leaf's shape": (
        lambda: make(0.1, 1, jnp.ones(2)),
        lambda: make(0.1, 1, jnp.ones(3)),
    ),
    "a weak and a strong float": (lambda: {"a": 1.0}, lambda: {"a": np.float32(1)}),
    "an int and a float": (lambda: {"a": 1}, lambda: {"a": 1.0}),
    "equal": (lambda: make(0.1, 1, jnp.ones(2)), lambda: make(0.3, 1, jnp.zeros(2))),
}


@pytest.mark.parametrize("pair", list(_PAIRS))
def test_none_exactly_when_jax_jit_traces_once(pair: str) -> None:
    first, second = _PAIRS[pair]
    a, b = first(), second()
    traces = 0

    @jax.jit
    def run(tree: Any) -> Any:
        nonlocal traces
        traces += 1
        return jax.tree_util.tree_leaves(tree)[:1]

    run(a)
    run(b)
    text = lift.diff(a, b)
    assert (text is None) == (traces == 1), (text, traces)
    if pair == "a captured dict in another order":
        assert text is not None
        assert "the same keys in another order" in text
    if pair == "adam, a float and a float32 learning rate":
        assert text == (
            ".update.captures['update_fns'][1].captures['tx'].update.captures["
            "'step_size']: a leaf of type ~float32[] in one, float32[] in the other (jax.jit "
            "compiles a program per leaf shape, dtype and weak type)"
        )


def test_diff_shows_a_grown_list_as_each_lifted_was_keyed() -> None:
    # The list is the user's own object, grown since the first lift: each side
    # is shown as it was when that `Lifted` was keyed.
    def make() -> tuple[Any, list[str]]:
        names = ["a"]

        def f(x: Any) -> Any:
            return x * len(names)

        return f, names

    f, names = make()
    before = lift.lift(f)
    names.append("b")
    after = lift.lift(f)
    said = lift.diff(before, after)
    assert said is not None
    assert "names = ['a'] vs ['a', 'b']" in said


def test_a_static_list_of_floats_changed_since_is_shown_as_keyed() -> None:
    # A float's key is its bits (`-nan` is not `nan`), read back as the float.
    def make(c: list[Any]) -> Any:
        return lambda x: x * c[0]

    c = [1.5, -0.0]
    before = lift.lift(make(c), static="c")
    c[0] = 9.5
    said = lift.diff(before, lift.lift(make([2.5, -0.0]), static="c"))
    assert said is not None and "c[0] = 1.5 vs 2.5" in said


def test_a_static_dict_changed_since_is_shown_as_keyed() -> None:
    # Keys that do not sort: the dict is one static, keyed by its items.
    def make(config: dict[Any, Any]) -> Any:
        return lambda x: x * config["lr"]

    config: dict[Any, Any] = {"lr": 0.1, 1: 2}
    before = lift.lift(make(config), static="config")
    config["lr"] = 0.2
    said = lift.diff(before, lift.lift(make(config), static="config"))
    assert said is not None and "config['lr'] = 0.1 vs 0.2" in said


# What XLA compiles, as JAX reports it (one listener for the module: JAX 0.8
# has no way to remove one).
_COMPILED: list[str] = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kwargs: (
        _COMPILED.append(event)
        if event == "/jax/core/compile/backend_compile_duration"
        else None
    )
)


def _compiles_of_both(a: Any, b: Any) -> int:
    """How many programs XLA compiles for a `jax.jit` call with `a`, then `b`."""
    _COMPILED.clear()
    run = jax.jit(lambda g, x: g(x))
    run(a, 1.0)
    run(b, 1.0)
    return len(_COMPILED)


_SALTS = itertools.count()


def _summing(w: Any, salt: int) -> Any:
    # `salt`, a static int, makes the program the test's own: none compiled
    # before (JAX's caches are on under lift's plugin) serves it.
    def f(x):
        return jnp.sum(w) + x + salt

    return lift.lift(f)


def _named(spec: Any, devices: Any = None) -> Callable[[Any], Any]:
    """A `NamedSharding` over all the devices (or `devices`) with `spec`."""

    def sharding(all_devices: Any) -> Any:
        mesh = jax.sharding.Mesh(np.array(devices or all_devices), ("x",))
        return jax.sharding.NamedSharding(mesh, spec)

    return sharding


_PLACEMENTS = {
    "committed to two devices": (lambda d: d[0], lambda d: d[1]),
    "equivalent specs": (
        _named(jax.sharding.PartitionSpec()),
        _named(jax.sharding.PartitionSpec(None)),
    ),
    "one device by two kinds of sharding": (
        lambda d: d[0],
        lambda d: _named(jax.sharding.PartitionSpec(), [d[0]])(d),
    ),
    "sharded and replicated": (
        _named(jax.sharding.PartitionSpec("x")),
        _named(jax.sharding.PartitionSpec()),
    ),
    "committed and not": (lambda d: d[0], lambda d: None),
    "committed to one device": (lambda d: d[1], lambda d: d[1]),
    "not committed": (lambda d: None, lambda d: None),
}


@several_devices
@pytest.mark.parametrize("placement", list(_PLACEMENTS))
def test_none_exactly_when_one_program_serves_both_placements(placement: str) -> None:
    """A captured array committed to a device (`jax.device_put(x, device)`)
    is compiled for where it is: a difference of placement is named."""
    devices = jax.devices()

    def on(where: Any) -> Any:
        w = jnp.ones(8)
        return w if where is None else jax.device_put(w, where)

    first, second = _PLACEMENTS[placement]
    salt = next(_SALTS)
    a, b = _summing(on(first(devices)), salt), _summing(on(second(devices)), salt)
    text = lift.diff(a, b)
    compiles = _compiles_of_both(a, b)
    assert (text is None) == (compiles == 1), (text, compiles)
    if placement == "committed to two devices":
        assert text == (
            f".captures['w']: a leaf committed to {devices[0]} in one, committed to "
            f"{devices[1]} in the other (jax.jit compiles a program per placement "
            "of an array committed to its devices)"
        )


def test_a_captured_list_of_numpy_scalars_is_shown_as_keyed() -> None:
    # Regression: reading the list back from its key raised TypeError.
    def holding(xs: Any) -> Any:
        return lift.lift(lambda x: x if xs else -x)  # a static list

    text = lift.diff(holding([np.float32(1)]), holding([np.float32(2)]))
    assert text is not None
    assert ".captures['xs'][0]: xs[0] = np.float32(1.0) vs np.float32(2.0)" in text


class _Partial(functools.partial):  # type: ignore[type-arg]
    pass


def test_partials_of_another_class_are_named() -> None:
    # Regression: said "the same functions and values, shared differently".
    def scale(x: Any, k: Any) -> Any:
        return x * k

    def holding(fn: Any) -> Any:
        return lift.lift(lambda x: fn(x))

    text = lift.diff(
        holding(_Partial(scale, k=2)), holding(functools.partial(scale, k=2))
    )
    assert text == (
        f".captures['fn']: functools.partial({scale.__qualname__}) is of class "
        "<class 'test_diff._Partial'> in one, <class 'functools.partial'> in the other"
    )


class _Checked:
    """A pytree whose unflatten takes nothing but an int child."""

    def __init__(self, n: Any) -> None:
        if type(n) is not int:
            raise TypeError("n must be an int")
        self.n = n


jax.tree_util.register_pytree_node(
    _Checked, lambda c: ((c.n,), None), lambda _, children: _Checked(*children)
)


def test_a_pytree_that_cannot_be_rebuilt_around_markers_is_compared_slot_by_slot() -> (
    None
):
    # Regression: diff raised the class's own TypeError.
    def holding(c: Any) -> Any:
        return lift.lift(lambda x: x * c.n if c.n else x)  # `c.n` static

    assert lift.diff(holding(_Checked(1)), holding(_Checked(1))) is None
    text = lift.diff(holding(_Checked(1)), holding(_Checked(2)))
    assert text is not None
    assert text.startswith(
        ".captures['c'][0]: c[0] = 1 vs 2, static because it is an int"
    )


# -- captures that differ in what they are, not in their values ---------------------


def _rate(x: Any, lr: Any = 0.0, mom: Any = 0.0) -> Any:
    return x * lr + mom


def test_keyword_arguments_of_a_partial_in_one_only_are_named() -> None:
    a = lift.lift(functools.partial(_rate, lr=0.1))
    b = lift.lift(functools.partial(_rate, mom=0.1))
    assert lift.diff(a, b) == (
        ".keywords['lr']: captured in one only\n"
        ".keywords['mom']: captured in the other only"
    )


def test_the_same_keyword_arguments_in_another_order_are_named() -> None:
    a = lift.lift(functools.partial(_rate, lr=0.1, mom=0.2))
    b = lift.lift(functools.partial(_rate, mom=0.2, lr=0.1))
    assert lift.diff(a, b) == "the same captures, in another order"


def test_a_captured_dict_of_leaves_in_another_order_is_named() -> None:
    def holding(d: Any) -> Any:
        return lift.lift(lambda x: x * d["a"] * d["b"])

    assert lift.diff(holding({"a": 1.0, "b": 2.0}), holding({"b": 2.0, "a": 1.0})) == (
        ".captures['d']: d holds {'a': *, 'b': *} in one, {'b': *, 'a': *} in the "
        "other (the same keys in another order: lift keeps a dict's insertion "
        "order, as Python iterates it, so each order is its own program)"
    )


def test_a_function_in_one_and_a_leaf_in_the_other_names_the_function() -> None:
    def holding(v: Any) -> Any:
        return lift.lift(lambda x: v(x) if callable(v) else x * v)

    def double(x: Any) -> Any:
        return x * 2

    text = lift.diff(holding(double), holding(2.0))
    assert text == (
        f".captures['v']: v is a function ({double.__qualname__} ({_line(double)})) "
        "in one, a leaf (dynamic) in the other (in test_a_function_in_one_and_a_"
        "leaf_in_the_other_names_the_function.<locals>.holding.<locals>.<lambda> at "
        f"{HERE}:{holding.__code__.co_firstlineno + 1})"
    )


def test_a_cell_bound_after_lifting_is_named_not_yet_bound() -> None:
    def made(bind_first: bool) -> Any:
        if bind_first:
            later = 1.0

        def f(x: Any) -> Any:
            return x * later

        lifted = lift.lift(f)
        later = 1.0  # bound after lifting
        return lifted

    text = lift.diff(made(False), made(True))
    assert text is not None
    assert text.startswith(
        ".captures['later']: later is not yet bound (an empty closure cell) in one, "
        "a leaf (dynamic) in the other (in "
    )


def test_a_static_left_by_a_dynamic_predicate_says_so() -> None:
    def made(n: float) -> Any:
        return lift.lift(lambda x: x * n, dynamic=lambda v: False)

    text = lift.diff(made(1.0), made(2.0))
    assert text is not None
    assert text.startswith(
        ".captures['n']: n = 1.0 vs 2.0, static because your `dynamic=` predicate "
        "left it static (in "
    )


def test_captured_lift_jit_functions_with_other_options_name_them() -> None:
    def calling(**options: Any) -> Any:
        jitted = lift.jit(lambda x: x * 2, **options)
        return lift.lift(lambda x: jitted(x))

    assert lift.diff(calling(), calling()) is None
    text = lift.diff(calling(), calling(donate_argnums=0))
    assert text is not None
    assert text.endswith(
        " has options (jax.jit options {}, ()) in one, (jax.jit options "
        "{'donate_argnums': 0}, ()) in the other"
    )
    assert text.startswith(".captures['jitted']: lift.jit(")


def test_a_capture_holding_one_value_in_one_and_a_tuple_in_the_other() -> None:
    # Regression: comparing a single value's structure (none) with a tuple's
    # raised TypeError from the treedef's `==`.
    def holding(v: Any) -> Any:
        return lift.lift(lambda x: x * v[0] if isinstance(v, tuple) else x * v)

    assert lift.diff(holding(1.0), holding((1.0, 2.0))) == (
        ".captures['v']: a leaf (dynamic) in one, a tuple of 2 in the other"
    )
    assert lift.diff(holding((1.0, 2.0)), holding(1.0)) == (
        ".captures['v']: a tuple of 2 in one, a leaf (dynamic) in the other"
    )


class _ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_static_metadata_whose_repr_raises_is_still_compared() -> None:
    text = lift.diff(_Static(_ReprRaises()), _Static(_ReprRaises()))
    assert text == (
        "_Static's static metadata differs: <tuple object> vs <tuple object>; a "
        "_ReprRaises has no `__eq__` of its own: compared by identity, so each new "
        "one compiles anew"
    )


# -- functions in a registered class's static metadata -------------------------------


def _one(x: Any) -> Any:
    return x


def _two(x: Any) -> Any:
    return x


class _Holder:
    """Not a dataclass: its attributes say which one holds the function."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn


jax.tree_util.register_pytree_node(
    _Holder, lambda h: ((), h.fn), lambda fn, _: _Holder(fn)
)

_BY_NAME = {"one": _one, "two": _two}


class _ByName:
    """Static metadata no attribute holds: the function is looked up by name."""

    def __init__(self, name: str) -> None:
        self.name = name


jax.tree_util.register_pytree_node(
    _ByName,
    lambda h: ((), _BY_NAME[h.name]),
    lambda fn, _: _ByName(fn.__name__.lstrip("_")),
)


def test_a_function_in_a_registered_classs_metadata_names_its_attribute() -> None:
    text = lift.diff(_Holder(_one), _Holder(_two))
    assert text is not None
    assert text.startswith(
        ".fn: the function _one is held in the static metadata of _Holder (field "
        "'fn' is not a pytree field), "
    )
    assert "\nFix: make `fn` a pytree field " in text
    text = lift.diff(_ByName("one"), _ByName("two"))
    assert text is not None
    assert text.startswith(
        "the function _one is held in the static metadata of _ByName (a field that "
        "is not a pytree field), "
    )
    assert "\nFix: make the field that holds it a pytree field " in text


class _Shadowed:
    """A node whose static data is its `__dict__`'s values, where a property
    that fails shadows the first entry."""

    broken = property(lambda self: 1 / 0)

    def __init__(self, fn: Any) -> None:
        self.__dict__.update(broken=None, fn=fn)


jax.tree_util.register_pytree_node(
    _Shadowed,
    lambda node: ((), tuple(vars(node).values())),
    lambda aux, children: _Shadowed(aux[1]),
)


def test_the_attribute_holding_a_static_function_is_named_past_one_that_fails():
    def scaled(lr: float) -> Any:
        return lift.lift(lambda x: x * lr)

    text = lift.diff(_Shadowed(scaled(0.1)), _Shadowed(scaled(0.2)))
    assert text is not None
    assert text.startswith(
        f".fn: a Lifted ({scaled.__qualname__}.<locals>.<lambda>) is held in the "
        "static metadata of _Shadowed (field 'fn' is not a pytree field)"
    )


def test_a_kept_list_of_values_lift_does_not_read_back_is_shown_as_it_is() -> None:
    # A list kept as your own object is shown as it held when lifted, read
    # back from its key; a `range` in it is shown as the list holds it now.
    def make(value: Any) -> Any:
        log = [value]
        return lambda x: x * len(log)

    assert lift.diff(lift.lift(make(range(3))), lift.lift(make(range(4)))) == (
        ".captures['log'][0]: log[0] = range(0, 3) vs range(0, 4), static because "
        "it is a range, not a float or array (in test_a_kept_list_of_values_lift_does_"
        "not_read_back_is_shown_as_it_is.<locals>.make.<locals>.<lambda> at "
        f"{__file__}:{make.__code__.co_firstlineno + 2})"
    )
