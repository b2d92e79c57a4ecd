"""Sweeps in libraries built on closures: blackjax's samplers and a model library
built on `Lifted`, plain against lifted against the limit.

- **blackjax NUTS step-size sweep**: for each step size, a fresh
  `blackjax.nuts(logdensity, step_size, inverse_mass_matrix)` kernel runs a
  `lax.scan` of sampling steps inside `jax.jit`. Plain, `kernel.step` is a
  static argument, as in blackjax's examples: a trace and a compile per value.
  Lifted, `lift.lift(kernel)` is an ordinary argument: one trace.
- **model sweep**: a generative-function library in the style of GenJAX, its
  models a `Lifted` subclass with `simulate` and `assess` (the library guide's
  example), each model a closure over its prior's scale; each runs a `lax.scan`
  of Langevin steps on its log density inside `jax.jit`. Plain, the model is a
  static argument (a Python closure); lifted, a pytree argument.

The limit is what no approach can beat: one compile, and every value's steps
run by the compiled program (the lifted first call, plus the lifted steady
call for each further value). Lifted against the limit is the cost of lifting
each new kernel or model and passing it in.

Run `python benchmarks/bench_clients.py` (`--quick` for fewer values); `main()`
returns the tables. Needs blackjax (the `bench` extra installs it).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm

import lift

Rows = list[dict[str, Any]]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


def _sweep_rows(
    values: list[float],
    plain: Callable[[float], Any],
    lifted: Callable[[float], Any],
    steady: Callable[[], Any],
    traces: list[int],
) -> Rows:
    """Time `plain(v)` and `lifted(v)` over `values` (each call blocks on its
    result), and `steady()`, a lifted call whose program is compiled."""
    traces[0] = 0
    start = time.perf_counter()
    for v in values:
        plain(v)
    t_plain, n_plain = time.perf_counter() - start, traces[0]

    traces[0] = 0
    first_start = time.perf_counter()
    lifted(values[0])
    t_first = time.perf_counter() - first_start
    for v in values[1:]:
        lifted(v)
    t_lifted, n_lifted = time.perf_counter() - first_start, traces[0]

    repeats = []
    for _ in range(5):
        start = time.perf_counter()
        steady()
        repeats.append(time.perf_counter() - start)
    t_steady = sorted(repeats)[len(repeats) // 2]
    t_limit = t_first + (len(values) - 1) * t_steady
    n = len(values)
    return [
        {
            "way": "plain (static argument)",
            "values": n,
            "traces": n_plain,
            "wall": _ms(t_plain),
            "vs limit": f"{t_plain / t_limit:.1f}x",
        },
        {
            "way": "lifted (`jax.jit` argument)",
            "values": n,
            "traces": n_lifted,
            "wall": _ms(t_lifted),
            "vs limit": f"{t_lifted / t_limit:.2f}x",
        },
        {
            "way": "limit: one compile plus the steps",
            "values": n,
            "traces": 1,
            "wall": _ms(t_limit),
            "vs limit": "1.00x",
        },
    ]


# -- blackjax ----------------------------------------------------------------------


def bench_blackjax(quick: bool, smoke: bool = False) -> tuple[str, Rows]:
    import blackjax

    dim, steps = 4, 5 if smoke else 50
    values = (
        [0.1, 0.2] if smoke else [0.1, 0.2, 0.3] if quick else [0.1, 0.15, 0.2, 0.25]
    )
    traces = [0]
    x0 = jnp.zeros(dim)
    key = jax.random.key(0)

    def logdensity(x: jax.Array) -> jax.Array:
        return -0.5 * jnp.sum(x**2)

    def run(step: Any, key: jax.Array, state: Any) -> jax.Array:
        traces[0] += 1

        def one(state: Any, key: jax.Array) -> tuple[Any, jax.Array]:
            state, _ = step(key, state)
            return state, state.position

        _, xs = jax.lax.scan(one, state, jax.random.split(key, steps))
        return xs

    plain_run = jax.jit(run, static_argnums=0)
    lifted_run = jax.jit(lambda kernel, key, state: run(kernel.step, key, state))

    def plain(step_size: float) -> Any:
        kernel = blackjax.nuts(logdensity, step_size, jnp.ones(dim))
        return plain_run(kernel.step, key, kernel.init(x0)).block_until_ready()

    kept: list[Any] = []

    def lifted(step_size: float) -> Any:
        # Other step sizes than the plain sweep's: no program of its is reused.
        kernel = lift.lift(blackjax.nuts(logdensity, step_size + 0.01, jnp.ones(dim)))
        kept[:] = [kernel]
        return lifted_run(kernel, key, kernel.init(x0)).block_until_ready()

    def steady() -> Any:
        kernel = kept[0]
        return lifted_run(kernel, key, kernel.init(x0)).block_until_ready()

    return f"{steps} steps, {dim}-d", _sweep_rows(
        values,
        plain,
        lifted,
        steady,
        traces,
    )


# -- a model library built on Lifted --------------------------------------------------


class _Sample:
    def __init__(self, key: jax.Array) -> None:
        self.key, self.choices, self.score = key, {}, 0.0

    def normal(self, name: str, mean: Any, std: Any) -> Any:
        self.key, key = jax.random.split(self.key)
        value = mean + std * jax.random.normal(key)
        self.choices[name] = value
        self.score = self.score + norm.logpdf(value, mean, std)
        return value


class _Assess:
    def __init__(self, choices: dict[str, Any]) -> None:
        self.choices, self.score = choices, 0.0

    def normal(self, name: str, mean: Any, std: Any) -> Any:
        value = self.choices[name]
        self.score = self.score + norm.logpdf(value, mean, std)
        return value


class GenerativeFunction(lift.Lifted):
    """A model `fn(h, *args)` that makes random choices with `h.normal`."""

    def simulate(self, key: jax.Array, *args: Any) -> Any:
        h = _Sample(key)
        retval = self(h, *args)
        return retval, h.choices, h.score

    def assess(self, choices: dict[str, Any], *args: Any) -> Any:
        h = _Assess(choices)
        retval = self(h, *args)
        return h.score, retval


def bench_models(quick: bool, smoke: bool = False) -> tuple[str, Rows]:
    steps, n_obs = 10 if smoke else 200, 8
    values = (
        [0.5, 1.0]
        if smoke
        else [0.5, 1.0, 2.0]
        if quick
        else [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]
    )
    xs = tuple(float(i) / n_obs for i in range(n_obs))
    ys = jnp.asarray([2.0 * x + 0.1 for x in xs])
    traces = [0]

    def make_model(prior_std: float) -> Callable[..., Any]:
        def model(h: Any) -> Any:
            slope = h.normal("slope", 0.0, prior_std)
            for i, x in enumerate(xs):
                h.normal(f"y{i}", slope * x, 0.1)
            return slope

        return model

    def langevin(model: Any, key: jax.Array) -> jax.Array:
        traces[0] += 1

        def log_density(slope: jax.Array) -> jax.Array:
            choices = {"slope": slope} | {f"y{i}": y for i, y in enumerate(ys)}
            return model.assess(choices)[0]

        def one(slope: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
            eps = 1e-3
            noise = jax.random.normal(key)
            slope = slope + eps * jax.grad(log_density)(slope)
            slope = slope + jnp.sqrt(2 * eps) * noise
            return slope, slope

        _, slopes = jax.lax.scan(one, jnp.asarray(0.0), jax.random.split(key, steps))
        return slopes

    key = jax.random.key(1)
    plain_run = jax.jit(langevin, static_argnums=0)
    lifted_run = jax.jit(langevin)

    def plain(prior_std: float) -> Any:
        # The library without lift: a model is its Python function, static.
        model = _PlainModel(make_model(prior_std))
        return plain_run(model, key).block_until_ready()

    kept: list[Any] = []

    def lifted(prior_std: float) -> Any:
        model = GenerativeFunction(make_model(prior_std * 1.5))
        kept[:] = [model]
        return lifted_run(model, key).block_until_ready()

    def steady() -> Any:
        return lifted_run(kept[0], key).block_until_ready()

    return f"{steps} Langevin steps, {n_obs} observations", _sweep_rows(
        values,
        plain,
        lifted,
        steady,
        traces,
    )


class _PlainModel:
    """The same interface over a plain function: hashable by identity, so a
    static argument of `jax.jit`."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def assess(self, choices: dict[str, Any], *args: Any) -> Any:
        h = _Assess(choices)
        retval = self.fn(h, *args)
        return h.score, retval


def main(quick: bool = False, smoke: bool = False) -> dict[str, Rows]:
    # blackjax is in the `bench` extra: without it this module fails, as a
    # benchmark that cannot run must.
    what, rows = bench_blackjax(quick, smoke)
    tables = {f"blackjax: a NUTS step-size sweep ({what})": rows}
    what, rows = bench_models(quick, smoke)
    tables[f"A model library on `Lifted`: a prior-scale sweep ({what})"] = rows
    return tables


def _table(rows: Rows) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---" for _ in keys) + "|"]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    for title, rows in main(
        quick="--quick" in sys.argv, smoke="--smoke" in sys.argv
    ).items():
        print(f"### {title}\n\n{_table(rows)}\n")
