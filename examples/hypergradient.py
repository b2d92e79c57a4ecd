"""Tune Adam's learning rate by gradient descent on the validation loss.

`jax.grad` of a function of a lifted optimizer is a lifted optimizer of the same
shape holding the derivative for each captured hyperparameter (learning rate,
`b1`, `b2`, `eps`), found by key path. The jitted hypergradient takes the
optimizer as an argument, so a new learning rate never retraces it.

    python examples/hypergradient.py --outer 30
"""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import lift

UNROLL = 20


def make_data(seed: int = 0) -> tuple[jax.Array, ...]:
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(8,)).astype(np.float32)
    x = rng.normal(size=(192, 8)).astype(np.float32)
    y = (x @ w + 0.1 * rng.normal(size=192)).astype(np.float32)
    return tuple(jnp.asarray(a) for a in (x[:128], y[:128], x[128:], y[128:]))


def loss(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((x @ w - y) ** 2)


def validation_loss(opt: Any, data: tuple[jax.Array, ...]) -> jax.Array:
    """Train `UNROLL` steps from zero with `opt`; the loss on held-out data."""
    x, y, x_val, y_val = data
    w = jnp.zeros(x.shape[1])

    def body(carry: Any, _: None) -> tuple[Any, None]:
        w, state = carry
        updates, state = opt.update(jax.grad(loss)(w, x, y), state, w)
        return (optax.apply_updates(w, updates), state), None

    (w, _), _ = jax.lax.scan(body, (w, opt.init(w)), None, length=UNROLL)
    return loss(w, x_val, y_val)


traces = 0


@jax.jit
def hypergradient(opt: Any, data: tuple[jax.Array, ...]) -> tuple[jax.Array, Any]:
    global traces
    traces += 1
    return jax.value_and_grad(validation_loss)(opt, data)


def by_name(tree: Any) -> dict[str, Any]:
    """Leaves by the last key of their path: `{'b1': ..., 'step_size': ...}`."""
    return {
        re.findall(r"\['(\w+)'\]", jax.tree_util.keystr(path))[-1]: leaf
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    }


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outer", type=int, default=30, help="hypergradient steps")
    parser.add_argument("--lr", type=float, default=1e-3, help="initial learning rate")
    parser.add_argument("--meta-lr", type=float, default=0.3, help="step on log(lr)")
    args = parser.parse_args(argv)

    data = make_data()
    log_lr = math.log(args.lr)
    for i in range(args.outer):
        lr = math.exp(log_lr)
        value, grads = hypergradient(lift.lift(optax.adam(lr)), data)
        # optax applies the rate as `step_size = -lr`: d/d(lr) = -d/d(step_size).
        d_lr = -float(by_name(grads)["step_size"])
        if i % 5 == 0 or i == args.outer - 1:
            others = ", ".join(
                f"d/d{k} {float(v):+.2e}"
                for k, v in by_name(grads).items()
                if k != "step_size"
            )
            print(
                f"step {i:3d}  lr {lr:.4f}  validation loss {float(value):.4f}  d/dlr {d_lr:+.3e}  ({others})"
            )
        # Normalised step on log(lr): scale-free and stable.
        log_lr -= args.meta_lr * math.copysign(min(abs(d_lr * lr), 1.0), d_lr)
    print(
        f"{args.outer} hypergradient steps, {traces} trace of the jitted hypergradient"
    )
    return math.exp(log_lr)


if __name__ == "__main__":
    main()
