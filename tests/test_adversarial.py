"""Breaks found by trying this round's changes as a user, a library author and a
peer library would. Each test states the contract and is expected to fail until
the cause named in its reason is fixed."""

from __future__ import annotations

import dataclasses
import pickle

import jax
import jax.numpy as jnp
import pytest

import lift


def _make(a):
    return lift.lift(lambda x: a * x)


# -- `Lifted.__hash__` and jax.jit ---------------------------------------------------


def test_jit_of_a_lifted_used_as_a_method_is_not_refused():
    # Found refused (hashed as a static argument); fixed since: kept as a guard.
    class Model:
        @lift.lift
        def apply(self, x):
            return 2 * x

    m = Model()
    assert m.apply(1.0) == 2.0
    assert jax.jit(m.apply)(1.0) == 2.0


def test_a_lifted_inside_a_hashable_dataclass_static_argument_warns():
    @dataclasses.dataclass(frozen=True)
    class Box:
        fn: object

    traces = []

    def body(box, x):
        traces.append(None)
        return box.fn(x)

    jitted = jax.jit(body, static_argnums=0)
    # Never a silent compile per call: each new one is said.
    for i in range(2):
        with pytest.warns(UserWarning, match="static argument"):
            jitted(Box(_make(jnp.float32(i))), 1.0)
    assert len(traces) == 2


# -- subclasses ------------------------------------------------------------------------


class _Model(lift.Lifted):
    """A library author's subclass with its own `__init__` (no options)."""

    def __init__(self, fn):
        super().__init__(fn)


def _scaled(x, a=jnp.float32(2.0)):
    return a * x


def test_a_subclass_with_its_own_init_pickles():
    m = _Model(_scaled)
    again = pickle.loads(pickle.dumps(m))
    assert type(again) is _Model
    assert again(1.0) == 2.0


# -- hidden tracers: lift.lift's refusal -------------------------------------------


def _escaped_tracer():
    kept = []
    with jax.check_tracer_leaks(False):
        jax.jit(lambda x: kept.append(x) or x)(1.0)
    return kept[0]


def test_a_closure_over_a_class_holding_an_escaped_tracer_is_refused_like_an_instance():
    class Registry:
        pass

    Registry.value = _escaped_tracer()

    def over(v):
        return lambda: v

    assert lift.find_leaks(over(Registry))  # the leak checker sees it
    with pytest.raises(lift.LiftError, match="tracer"):
        lift.lift(over(Registry()))  # refused through an instance
    with pytest.raises(lift.LiftError, match="tracer"):
        lift.lift(over(Registry))  # and through the class itself


def test_lifting_a_closure_over_a_large_object_array_is_cheap():
    import time

    import numpy as np

    n = 300_000
    names = np.empty(n, dtype=object)
    names[:] = [None] * n

    def over(v):
        return lambda: v

    lift.lift(over(names))  # the first walk
    start = time.perf_counter()
    lift.lift(over(names))  # a replay
    assert time.perf_counter() - start < 0.8


# -- lift.flax.TrainState --------------------------------------------------------------


def test_train_state_replace_with_a_new_optimizer_still_jits():
    import optax

    import lift.flax

    @jax.jit
    def step(state, x):
        grads = jax.grad(lambda p: jnp.sum((p["w"] * x - 2.0) ** 2))(state.params)
        return state.apply_gradients(grads=grads)

    state = lift.flax.TrainState.create(
        apply_fn=None, params={"w": jnp.ones(3)}, tx=optax.adam(0.1)
    )
    state = step(state, jnp.ones(3))
    state = state.replace(tx=optax.adam(0.05))
    assert step(state, jnp.ones(3)).params["w"].shape == (3,)


# -- lift.diff -------------------------------------------------------------------------


def test_diff_names_only_the_static_fields_that_differ():
    import optax
    from flax.training import train_state

    class Model:
        def apply(self, params, x):
            return params["w"] * x

    model = Model()

    def state():
        return train_state.TrainState.create(
            apply_fn=model.apply, params={"w": jnp.ones(2)}, tx=optax.sgd(0.1)
        )

    a, b = state(), state()
    same_tx = b.replace(tx=a.tx)
    # apply_fn alone does not make the treedefs differ: JAX compares it with ==.
    assert jax.tree.structure(a) == jax.tree.structure(same_tx)
    assert lift.diff(a, same_tx) is None
    found = lift.diff(a, b)
    assert found is not None and ".tx" in found
    assert ".apply_fn" not in found


# -- float conversion: history --------------------------------------------------------


def test_float_leaves_under_a_mesh_do_not_depend_on_history(monkeypatch):
    # Found: the jitted-identity conversion gave committed mesh-sharded leaves
    # where jax.device_put gave single-device ones. Fixed since; kept as a guard.
    from jax.sharding import AxisType

    from lift import _lifted

    if len(jax.devices()) < 2:
        pytest.skip("needs several devices")

    def make(a, b):
        return lift.lift(lambda x: a * x + b)

    def kinds(f):
        return [(str(x.sharding), x.committed, x.weak_type) for x in jax.tree.leaves(f)]

    traces = []

    @jax.jit
    def call(f, x):
        traces.append(None)
        return f(x)

    mesh = jax.make_mesh((len(jax.devices()),), ("x",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        monkeypatch.setattr(_lifted, "_COMPILE_AFTER", 10**9)
        monkeypatch.setattr(_lifted, "_RECURRING", 10**9)
        first = make(0.2, 0.3)
        call(first, 1.0)
        monkeypatch.setattr(_lifted, "_COMPILE_AFTER", 0)
        monkeypatch.setattr(_lifted, "_RECURRING", 0)
        later = make(0.2, 0.3)
        call(later, 1.0)
    assert kinds(first) == kinds(later)
    assert len(traces) == 1


def test_a_closure_over_a_bound_builtin_method_inside_jit_is_not_refused():
    @jax.jit
    def run(x):
        seen = [x]
        push = seen.append  # a bound builtin method of a list holding a live tracer

        def record(y):
            push(y)
            return 2 * y

        return lift.lift(record)(x)

    assert run(1.0) == 2.0


def test_a_flax_train_state_checkpoint_restores_into_lift_flax_train_state():
    import optax
    from flax import serialization
    from flax.training import train_state

    import lift.flax

    saved = train_state.TrainState.create(
        apply_fn=None, params={"w": jnp.ones(2)}, tx=optax.adam(0.1)
    )
    target = lift.flax.TrainState.create(
        apply_fn=None, params={"w": jnp.zeros(2)}, tx=optax.adam(0.1)
    )
    restored = serialization.from_bytes(target, serialization.to_bytes(saved))
    assert (restored.params["w"] == 1.0).all()


# -- optax.MultiSteps ------------------------------------------------------------------


def test_a_lifted_multisteps_keeps_has_updated():
    import optax

    opt = lift.lift(optax.MultiSteps(optax.adam(0.1), every_k_schedule=2))
    params = {"w": jnp.ones(2)}
    state = opt.init(params)
    _, state = opt.update(params, state, params)
    assert not opt.has_updated(state)


# -- buffers shared between two Lifted --------------------------------------------------


class _Density(lift.Lifted):
    pass


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
@pytest.mark.parametrize("convert", [_Density, lift.Lifted])
def test_a_lifted_made_from_a_called_lifted_shares_no_buffer(convert):
    # Found: Sub(lifted) took the other's converted float buffers once it had been
    # called, so donating one deleted the other's. Fixed since; kept as a guard.
    def make(a, b):
        return lift.lift(lambda x: a * x + b)

    original = make(0.5, 0.25)
    assert original(1.0) == 0.75  # its floats are converted now
    other = convert(original)
    assert other is not original
    jax.jit(lambda f: f(1.0), donate_argnums=0)(other)
    assert original(1.0) == 0.75


# -- lift.checked given a function already transformed ----------------------------------


def test_checked_given_a_checked_jitted_function_is_refused_with_the_fix():
    def f(x):
        return 2 * x

    jitted = lift.checked(jax.jit)(f)
    with pytest.raises(lift.LiftError, match="already"):
        lift.checked(jitted)


# -- a capture replaced by a Python float ----------------------------------------------


def test_a_capture_replaced_by_a_python_float_compiles_once_under_filter_jit():
    import equinox as eqx

    def make(lr):
        return lift.lift(lambda x: x * lr)

    traces = []

    @eqx.filter_jit
    def call(f, x):
        traces.append(None)
        return f(x)

    base = make(0.1)
    for lr in (0.2, 0.3, 0.4):
        call(eqx.tree_at(lambda f: f.captures["lr"], base, lr), jnp.ones(2))
    assert len(traces) == 1
