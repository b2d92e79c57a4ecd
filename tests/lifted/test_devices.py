"""Many devices: `Lifted` across a CPU mesh of eight devices.

`scripts/test.sh` (and `conftest.py`) give JAX eight host devices through
`XLA_FLAGS=--xla_force_host_platform_device_count=8`. Captures sharded with
`NamedSharding` keep their sharding as leaves; `jax.jit` with `in_shardings` /
`out_shardings` given as a `Lifted` of shardings, `lift.jit` with shardings,
`shard_map` and `pmap` taking `Lifted` arguments all give the results of the
same program on one device.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import TraceCounter
from jax.sharding import NamedSharding, PartitionSpec as P

import lift

DEVICES = 8

# On CPU the suite has eight host devices; an accelerator as the default
# device (one TPU chip) has fewer: these tests then skip, saying why.
pytestmark = pytest.mark.skipif(
    jax.device_count() < DEVICES,
    reason=f"needs {DEVICES} devices of the default backend (on CPU: "
    f"XLA_FLAGS=--xla_force_host_platform_device_count={DEVICES})",
)


def _mesh() -> jax.sharding.Mesh:
    assert jax.device_count() == DEVICES, (
        "run with XLA_FLAGS=--xla_force_host_platform_device_count=8"
    )
    return jax.make_mesh((2, 4), ("data", "model"))


def _make(w: Any, b: Any, lr: float) -> Any:
    def layer(x):
        return jnp.tanh(x @ w + b) * lr

    return layer


def _reference(w: np.ndarray, b: np.ndarray, lr: float, x: np.ndarray) -> np.ndarray:
    """The same function on one device, with plain arrays."""
    one = jax.devices()[0]
    f = _make(jax.device_put(w, one), jax.device_put(b, one), lr)
    return np.asarray(jax.jit(f)(jax.device_put(x, one)))


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    return w, b, x


def _call(g: Any, x: Any) -> Any:
    return g(x)


def test_sharded_captures_stay_sharded_and_give_one_device_results():
    mesh = _mesh()
    w, b, x = _data()
    ws = jax.device_put(w, NamedSharding(mesh, P(None, "model")))
    bs = jax.device_put(b, NamedSharding(mesh, P("model")))
    lifted = lift.lift(_make(ws, bs, 0.5))
    shardings = {
        jax.tree_util.keystr(path): leaf.sharding
        for path, leaf in jax.tree_util.tree_flatten_with_path(lifted)[0]
    }
    assert shardings[".captures['w']"] == ws.sharding
    assert shardings[".captures['b']"] == bs.sharding
    xs = jax.device_put(x, NamedSharding(mesh, P("data", None)))
    out = jax.jit(_call)(lifted, xs)
    np.testing.assert_allclose(out, _reference(w, b, 0.5, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        lifted(xs), _reference(w, b, 0.5, x), rtol=1e-5, atol=1e-6
    )


def test_jit_in_and_out_shardings_given_as_a_lifted_of_shardings():
    mesh = _mesh()
    w, b, x = _data(1)
    lifted = lift.lift(_make(jnp.asarray(w), jnp.asarray(b), 0.25))
    specs = {".captures['w']": P(None, "model"), ".captures['b']": P("model")}
    paths, treedef = jax.tree_util.tree_flatten_with_path(lifted)
    # `lr` (a Python float) is a leaf too: replicated.
    sharding_tree = jax.tree_util.tree_unflatten(
        treedef,
        [
            NamedSharding(mesh, specs.get(jax.tree_util.keystr(p), P()))
            for p, _ in paths
        ],
    )
    assert lift.is_lifted(sharding_tree)
    x_sharding = NamedSharding(mesh, P("data", None))
    counter = TraceCounter()

    def step(g, x):
        # Returns the function with updated captures, and its output.
        new = jax.tree_util.tree_map(lambda v: v * 2, g)
        return new, new(x)

    jitted = counter.jit(
        step,
        in_shardings=(sharding_tree, x_sharding),
        out_shardings=(sharding_tree, x_sharding),
    )
    new, out = jitted(lifted, x)
    assert lift.is_lifted(new)
    for (path, leaf), want in zip(
        jax.tree_util.tree_flatten_with_path(new)[0],
        jax.tree_util.tree_leaves(sharding_tree),
        strict=True,
    ):
        assert leaf.sharding == want, jax.tree_util.keystr(path)
    np.testing.assert_allclose(
        out, _reference(2 * w, 2 * b, 0.5, x), rtol=1e-5, atol=1e-6
    )
    # Another learning rate and new weights: the same program.
    jitted(lift.lift(_make(jnp.asarray(-w), jnp.asarray(b), 0.75)), x)
    assert counter.traces == 1


def test_lift_jit_with_shardings_on_a_sharded_closure():
    mesh = _mesh()
    w, b, x = _data(2)
    ws = jax.device_put(w, NamedSharding(mesh, P(None, "model")))
    lr = 0.5
    counter = TraceCounter()  # not a pytree: the lifted copy shares it

    @lift.jit(
        in_shardings=(NamedSharding(mesh, P("data", None)),),
        out_shardings=NamedSharding(mesh, P("data", "model")),
    )
    def layer(x):
        counter.traces += 1
        return jnp.tanh(x @ ws + b) * lr

    out = layer(x)
    assert out.sharding == NamedSharding(mesh, P("data", "model"))
    np.testing.assert_allclose(out, _reference(w, b, lr, x), rtol=1e-5, atol=1e-6)
    lr = 0.125  # a dynamic capture rebound: read at call time, no retrace
    np.testing.assert_allclose(layer(x), _reference(w, b, lr, x), rtol=1e-5, atol=1e-6)
    assert counter.traces == 1


def test_shard_map_takes_a_lifted_argument():
    mesh = _mesh()
    w, b, x = _data(3)
    x8 = np.concatenate([x, x + 1], axis=0)  # 8 rows: one per device
    lifted = lift.lift(_make(jnp.asarray(w), jnp.asarray(b), 0.5))
    flat_mesh = jax.make_mesh((DEVICES,), ("i",))

    # Captures replicated, the batch split over eight devices.
    mapped = jax.jit(
        jax.shard_map(_call, mesh=flat_mesh, in_specs=(P(), P("i")), out_specs=P("i"))
    )
    np.testing.assert_allclose(
        mapped(
            jax.device_put(lifted, NamedSharding(flat_mesh, P())),
            jax.device_put(x8, NamedSharding(flat_mesh, P("i"))),
        ),
        _reference(w, b, 0.5, x8),
        rtol=1e-5,
        atol=1e-6,
    )

    # Captures split over the model axis: each device computes its columns.
    spec_tree = jax.tree_util.tree_map(lambda _: P(), lifted)
    paths, treedef = jax.tree_util.tree_flatten_with_path(lifted)
    specs = {".captures['w']": P(None, "model"), ".captures['b']": P("model")}
    spec_tree = jax.tree_util.tree_unflatten(
        treedef, [specs.get(jax.tree_util.keystr(p), P()) for p, _ in paths]
    )
    columns = jax.jit(
        jax.shard_map(
            _call,
            mesh=mesh,
            in_specs=(spec_tree, P("data", None)),
            out_specs=P("data", "model"),
        )
    )
    np.testing.assert_allclose(
        columns(
            # `device_put` takes the Lifted of specs as a tree of shardings.
            jax.device_put(
                lifted,
                jax.tree_util.tree_map(lambda p: NamedSharding(mesh, p), spec_tree),
            ),
            jax.device_put(x8, NamedSharding(mesh, P("data", None))),
        ),
        _reference(w, b, 0.5, x8),
        rtol=1e-5,
        atol=1e-6,
    )


def test_shard_map_returns_a_lifted():
    flat_mesh = jax.make_mesh((DEVICES,), ("i",))
    w = np.arange(DEVICES * 2, dtype=np.float32)
    lifted = lift.lift(lambda x, w=jnp.asarray(w): x * w)

    def scale(g):
        return jax.tree_util.tree_map(lambda v: v * 3, g)

    mapped = jax.shard_map(scale, mesh=flat_mesh, in_specs=P("i"), out_specs=P("i"))
    out = jax.jit(mapped)(jax.device_put(lifted, NamedSharding(flat_mesh, P("i"))))
    assert lift.is_lifted(out)
    np.testing.assert_array_equal(out(1.0), 3 * w)
    assert jax.tree_util.tree_leaves(out)[0].sharding == NamedSharding(
        flat_mesh, P("i")
    )


def test_pmap_over_stacked_lifted():
    w, b, x = _data(4)
    variants = [
        lift.lift(_make(jnp.asarray(w) * (i + 1), jnp.asarray(b), 0.1 * (i + 1)))
        for i in range(DEVICES)
    ]
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *variants)
    out = jax.pmap(_call, in_axes=(0, None))(stacked, x)
    assert out.shape == (DEVICES, 4, 8)
    for i in range(DEVICES):
        np.testing.assert_allclose(
            out[i],
            _reference(w * (i + 1), b, np.float32(0.1 * (i + 1)), x),
            rtol=1e-5,
            atol=1e-6,
        )
    # pmap returning a Lifted: one copy per device.
    doubled = jax.pmap(lambda g: jax.tree_util.tree_map(lambda v: 2 * v, g))(stacked)
    assert lift.is_lifted(doubled)
    np.testing.assert_allclose(
        jax.tree_util.tree_leaves(doubled)[0], 2 * jax.tree_util.tree_leaves(stacked)[0]
    )


def test_vmap_inside_shard_map_over_lifted_ensemble():
    # An ensemble of eight lifted layers, one per device, each vmapped over a batch.
    flat_mesh = jax.make_mesh((DEVICES,), ("i",))
    w, b, x = _data(5)
    variants = [
        lift.lift(_make(jnp.asarray(w) + i, jnp.asarray(b), 0.5))
        for i in range(DEVICES)
    ]
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *variants)

    def per_device(g, x):
        return jax.vmap(_call, in_axes=(0, None))(g, x)

    out = np.asarray(
        jax.jit(
            jax.shard_map(
                per_device, mesh=flat_mesh, in_specs=(P("i"), P()), out_specs=P("i")
            )
        )(
            jax.device_put(stacked, NamedSharding(flat_mesh, P("i"))),
            jax.device_put(x, NamedSharding(flat_mesh, P())),
        )
    )
    for i in range(DEVICES):
        np.testing.assert_allclose(
            out[i], _reference(w + i, b, 0.5, x), rtol=1e-5, atol=1e-6
        )
