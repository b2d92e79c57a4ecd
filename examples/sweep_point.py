"""One point of a learning-rate sweep, as one process of a sweep run as jobs.

    python examples/sweep_point.py lifted 0.1 /shared/jax-cache
    python examples/sweep_point.py plain 0.1 /shared/jax-cache

Trains Adam for 20 steps with the given learning rate, the optimizer lifted (an
argument of the compiled function) or plain (a static argument), with JAX's
persistent compilation cache in the given directory, and prints how many
programs it compiled (cache misses) and how many it loaded (cache hits).
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

import lift

# Before the first compile: the cache's directory, and every program written.
jax.config.update("jax_compilation_cache_dir", sys.argv[3])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)

events = []
jax.monitoring.register_event_listener(lambda event, **_: events.append(event))


def train(opt, params):
    def step(carry, _):
        params, state = carry
        grads = jax.grad(lambda p: jnp.sum((p - 1.0) ** 2))(params)
        updates, state = opt.update(grads, state, params)
        return (optax.apply_updates(params, updates), state), None

    init = (params, opt.init(params))
    (params, _), _ = jax.lax.scan(step, init, length=20)
    return params


mode, lr = sys.argv[1], float(sys.argv[2])
params = np.zeros(3, np.float32)
if mode == "plain":
    # The optimizer static: its learning rate a constant of the program.
    jax.jit(train, static_argnums=0)(optax.adam(lr), params)
else:
    # The optimizer an argument: its learning rate an input of the program.
    jax.jit(train)(lift.lift(optax.adam(lr)), params)
print(
    events.count("/jax/compilation_cache/cache_misses"),
    events.count("/jax/compilation_cache/cache_hits"),
)
