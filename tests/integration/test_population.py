"""A population sharded over devices: N configurations stacked along one axis
(`lift.stack`), placed with a `NamedSharding` over a mesh, trained by one
compiled program, each device training its share; each member equal to its own
run. On CPU the suite has eight devices (conftest: `XLA_FLAGS`)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from helpers import TraceCounter, several_devices
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import lift

STEPS = 5


def _loss(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    return jnp.mean((jnp.tanh(x @ p["w"] + p["b"]) - 0.25) ** 2)


def _train(opt: Any, p: Any, x: jax.Array) -> tuple[Any, jax.Array]:
    """`STEPS` steps in a scan: the last params and losses."""

    def body(carry: Any, _: None) -> tuple[Any, jax.Array]:
        p, s = carry
        loss, g = jax.value_and_grad(_loss)(p, x)
        u, s = opt.update(g, s, p)
        return (optax.apply_updates(p, u), s), loss

    (p, _), losses = jax.lax.scan(body, (p, opt.init(p)), None, length=STEPS)
    return p, losses


def _population(rates: np.ndarray) -> Any:
    return lift.stack(
        [
            lift.lift(optax.chain(optax.clip(1.0), optax.adamw(float(lr))))
            for lr in rates
        ]
    )


@several_devices
def test_a_population_sharded_over_devices_trains_in_one_program() -> None:
    n = 2 * len(jax.devices())  # two members a device
    mesh = Mesh(np.asarray(jax.devices()), ("pop",))
    rows = NamedSharding(mesh, P("pop"))
    x = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
    params = {"w": jnp.full((3, 2), 0.1), "b": jnp.zeros(2)}
    # Each member starts from its own params: one row each, sharded too.
    stacked = jax.tree.map(
        lambda a: a + 0.01 * jnp.arange(n).reshape(-1, *[1] * a.ndim), params
    )

    counter = TraceCounter()
    train = counter.jit(jax.vmap(_train, in_axes=(0, 0, None)))
    rates = np.geomspace(1e-3, 1e-1, n)
    opts = jax.device_put(_population(rates), rows)
    stacked = jax.device_put(stacked, rows)
    (final, losses) = train(opts, stacked, x)
    # Another population, other rates: the same program.
    train(jax.device_put(_population(rates * 3), rows), stacked, x)
    assert counter.traces == 1

    # Each device trained its share: the results stay sharded by member.
    assert losses.shape == (n, STEPS)
    assert losses.sharding.is_equivalent_to(rows, losses.ndim)
    assert {s.device for s in losses.addressable_shards} == set(jax.devices())
    assert all(s.data.shape == (2, STEPS) for s in losses.addressable_shards)
    # Each member against its own run: one program, NumPy rows (no eager op).
    one = jax.jit(_train)
    host, losses, final = jax.tree.map(np.asarray, (stacked, losses, final))
    for i, lr in enumerate(rates):
        member = jax.tree.map(lambda a, i=i: a[i], host)
        opt = lift.lift(optax.chain(optax.clip(1.0), optax.adamw(float(lr))))
        p, want = one(opt, member, x)
        np.testing.assert_allclose(losses[i], want, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(final["w"][i], p["w"], rtol=1e-5, atol=1e-7)
