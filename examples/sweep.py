"""A learning-rate sweep of `optax.adam`, three ways.

1. plain optax: the optimizer is a static argument of the jitted train step, so
   every learning rate traces and compiles the step anew;
2. lifted: `lift.lift(optax.adam(lr))` is an ordinary argument, so one compiled
   step serves every rate;
3. lifted + vmap: a batch of lifted optimizers trains every rate at once, in one
   compiled program and one dispatch.

The lifted ways train with the learning rate as a float32 input of the program,
where plain optax folds it in as a constant computed in float64: their loss
curves match plain optax's to the last bits at first and can drift apart later
(the table's "max rel. Δloss vs plain" column; the Numerics section of the
optimizers guide). With `--x64` every way computes in float64 and the lifted
curves are plain optax's: the difference was float32 rounding, not lift.

The problem is a small synthetic regression (a two-layer MLP fitting a noisy
teacher) generated here, so the script needs nothing but its dependencies.

    python examples/sweep.py                 # 8 rates, 200 steps, out/sweep.png
    python examples/sweep.py --rates 16 --steps 500 --out sweep.png
    python examples/sweep.py --x64           # float64: the Δloss column near 0
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm import tqdm

import lift

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

# -- the problem ---------------------------------------------------------------------


def make_data(n: int = 512, d: int = 8, seed: int = 0) -> tuple[jax.Array, jax.Array]:
    """A noisy teacher MLP: inputs `x` of shape (n, d), targets `y` of shape (n,)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    w1 = rng.normal(size=(d, 16)).astype(np.float32) / np.sqrt(d)
    w2 = rng.normal(size=(16,)).astype(np.float32)
    y = np.tanh(x @ w1) @ w2 + 0.1 * rng.normal(size=n).astype(np.float32)
    # JAX's default float: float32, or float64 under `--x64`.
    return jnp.asarray(x, dtype=float), jnp.asarray(y, dtype=float)


def init_params(d: int = 8, hidden: int = 32, seed: int = 1) -> dict[str, jax.Array]:
    rng = np.random.default_rng(seed)
    return {
        "w1": jnp.asarray(
            rng.normal(size=(d, hidden)).astype(np.float32) / np.sqrt(d), dtype=float
        ),
        "b1": jnp.zeros(hidden),
        "w2": jnp.asarray(
            rng.normal(size=(hidden,)).astype(np.float32) / np.sqrt(hidden),
            dtype=float,
        ),
        "b2": jnp.zeros(()),
    }


def loss_fn(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)


# -- counting ------------------------------------------------------------------------


class Counts:
    """Traces of the train step (a counter in the traced function) and XLA
    compilations (JAX's own monitoring event), per way."""

    def __init__(self) -> None:
        self.traces = 0
        self.compiles = 0
        self._active = False
        jax.monitoring.register_event_duration_secs_listener(self._on_event)

    def _on_event(self, event: str, duration: float, **_: Any) -> None:
        if self._active and event == BACKEND_COMPILE_EVENT:
            self.compiles += 1

    @contextmanager
    def window(self) -> Iterator[None]:
        self.traces = self.compiles = 0
        self._active = True
        try:
            yield
        finally:
            self._active = False


COUNTS = Counts()


def train_step(opt: Any, params: Any, state: Any, x: jax.Array, y: jax.Array) -> Any:
    COUNTS.traces += 1  # runs only while JAX traces
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss


# -- the three ways --------------------------------------------------------------------


def plain_optax(rates: np.ndarray, steps: int, data: Any, bar: tqdm) -> np.ndarray:
    """The optimizer is static: each new `optax.adam(lr)` is a new static value."""
    step = jax.jit(train_step, static_argnums=0)
    curves = []
    for lr in rates:
        opt = optax.adam(float(lr))
        params = init_params()
        state = opt.init(params)
        losses = []
        for _ in range(steps):
            params, state, loss = step(opt, params, state, *data)
            losses.append(loss)
        curves.append(losses)
        bar.update()
    return np.asarray(jax.device_get(curves))


def lifted(rates: np.ndarray, steps: int, data: Any, bar: tqdm) -> np.ndarray:
    """The optimizer is an argument: its learning rate is a leaf, not a constant."""
    step = jax.jit(train_step)
    curves = []
    for lr in rates:
        opt = lift.lift(optax.adam(float(lr)))
        params = init_params()
        state = opt.init(params)
        losses = []
        for _ in range(steps):
            params, state, loss = step(opt, params, state, *data)
            losses.append(loss)
        curves.append(losses)
        bar.update()
    return np.asarray(jax.device_get(curves))


def lifted_vmap(rates: np.ndarray, steps: int, data: Any, bar: tqdm) -> np.ndarray:
    """A batch of lifted optimizers, trained together: one program, one dispatch."""

    @jax.jit
    def sweep(lrs: jax.Array, params: Any, x: jax.Array, y: jax.Array) -> jax.Array:
        opts = jax.vmap(lambda lr: lift.lift(optax.adam(lr)))(lrs)

        def train(opt: Any) -> jax.Array:
            def body(carry: Any, _: None) -> tuple[Any, jax.Array]:
                p, s = carry
                p, s, loss = train_step(opt, p, s, x, y)
                return (p, s), loss

            _, losses = jax.lax.scan(
                body, (params, opt.init(params)), None, length=steps
            )
            return losses

        return jax.vmap(train)(opts)

    rates = rates.astype(jnp.result_type(float))  # no eager op to compile
    curves = sweep(jax.device_put(rates), init_params(), *data)
    curves = np.asarray(jax.block_until_ready(curves))
    bar.update(len(rates))
    return curves


WAYS: dict[str, Callable[[np.ndarray, int, Any, tqdm], np.ndarray]] = {
    "plain optax": plain_optax,
    "lift": lifted,
    "lift + vmap": lifted_vmap,
}


# -- reporting ---------------------------------------------------------------------------


# What the last column of the table means.
NUMERICS = (
    "Δloss: lifted, Adam's hyperparameters are float32 values at run time where plain\n"
    "optax folds them in as float64 constants, so the curves differ in the last bits\n"
    "at first and can drift apart later (the plot's lower left; docs: Optimizers\n"
    "without recompilation, Numerics). Run with --x64 to compute in float64: lift's\n"
    "curves are then plain optax's (lift + vmap batches the arithmetic differently)."
)
NUMERICS_X64 = (
    "Δloss: in float64 (--x64) lift's curves are plain optax's; lift + vmap batches\n"
    "the arithmetic differently, a difference in the last bits."
)


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'way':<13} {'traces':>6} {'compiles':>8} {'wall time (s)':>13} "
        f"{'max rel. Δloss vs plain':>23}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['way']:<13} {r['traces']:>6} {r['compiles']:>8} {r['time']:>13.2f} "
            f"{r['delta']:>23.1e}"
        )
    return "\n".join(lines)


def plot(rates: np.ndarray, rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # The loss curves across the top; below, how far the lifted ways are from
    # plain optax, and the wall times.
    fig = plt.figure(figsize=(11, 8.4))
    grid = fig.add_gridspec(2, 2, height_ratios=(3, 2), width_ratios=(3, 2))
    ax1 = fig.add_subplot(grid[0, :])
    ax2 = fig.add_subplot(grid[1, 0])
    ax3 = fig.add_subplot(grid[1, 1])
    colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, len(rates)))
    by_way = {r["way"]: r for r in rows}
    plain = by_way["plain optax"]["curves"]
    steps = plain.shape[1]
    every = max(steps // 12, 1)
    for i, lr in enumerate(rates):
        ax1.plot(by_way["lift"]["curves"][i], color=colors[i], lw=1.5)
        ax1.plot(by_way["lift + vmap"]["curves"][i], color=colors[i], lw=1.5, ls="--")
        # Plain optax on top, as markers: where the curves agree, the markers
        # sit on the lines; where they drift apart, off them.
        ax1.plot(
            plain[i],
            color=colors[i],
            ls="none",
            marker="o",
            markevery=(i % every, every),
            markersize=5,
            markerfacecolor="none",
            zorder=3,
            label=f"lr={lr:.1e}",
        )
    ax1.set_yscale("log")
    ax1.set_xlabel("step")
    ax1.set_ylabel("training loss")
    ax1.set_title("Loss: lift (solid), lift + vmap (dashed), plain optax (circles)")
    ax1.legend(fontsize=8, ncol=2)
    # How far each lifted way is from plain optax, step by step (worst rate).
    for name, color, style in (
        ("lift", "#4c72b0", "-"),
        ("lift + vmap", "#55a868", "--"),
    ):
        rel = np.abs(by_way[name]["curves"] - plain) / np.abs(plain)
        worst = np.max(rel, axis=0)
        label = f"{name} (0 at every step)" if not worst.any() else name
        ax2.plot(np.maximum(worst, 1e-17), color=color, ls=style, lw=2, label=label)
    eps = float(np.finfo(plain.dtype).eps)
    ax2.axhline(eps, color="#999999", lw=0.8, ls=":")
    ax2.annotate(
        f"{plain.dtype} eps",
        (steps * 0.6, eps),
        fontsize=7,
        color="#666666",
        va="bottom",
    )
    ax2.set_yscale("log")
    ax2.set_ylim(bottom=1e-17 if plain.dtype == np.float64 else 1e-9)
    ax2.set_xlabel("step")
    ax2.set_ylabel("max rel. Δloss vs plain")
    ax2.set_title(f"Distance from plain optax ({plain.dtype}, worst rate)")
    ax2.legend(fontsize=8)
    names = [r["way"] for r in rows]
    times = [r["time"] for r in rows]
    bars = ax3.bar(names, times, color=["#999999", "#4c72b0", "#55a868"])
    for bar, r in zip(bars, rows, strict=True):
        ax3.annotate(
            f"{r['time']:.2f} s\n{r['compiles']} compile{'s' if r['compiles'] != 1 else ''}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax3.set_ylabel("wall time, compile included (s)")
    ax3.set_title(f"{len(rates)} learning rates")
    ax3.set_ylim(0, max(times) * 1.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rates", type=int, default=8, help="number of learning rates (default 8)"
    )
    parser.add_argument(
        "--steps", type=int, default=200, help="Adam steps per rate (default 200)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "out" / "sweep.png",
        help="PNG to write (default out/sweep.png)",
    )
    parser.add_argument(
        "--x64",
        action="store_true",
        help="compute in float64 (jax_enable_x64): the lifted curves match plain optax's",
    )
    processes = HERE / "processes.py"
    if processes.exists():
        parser.add_argument(
            "--processes",
            action="store_true",
            help="also run the sweep as separate processes with lift.jit (examples/processes.py)",
        )
    args = parser.parse_args(argv)
    if args.x64:
        jax.config.update("jax_enable_x64", True)

    rates = np.geomspace(1e-3, 3e-1, args.rates)
    data = make_data()
    # Untimed: compile the few eager ops the ways share (data, parameter init, and
    # the optimizer's init, plain and lifted: eagerly each op is a program of its
    # own, and newer JAX compiles the lifted init's separately).
    jax.block_until_ready(
        (
            init_params(),
            optax.adam(1e-3).init(init_params()),
            lift.lift(optax.adam(1e-3)).init(init_params()),
        )
    )

    print(
        f"jax {jax.__version__}, optax {optax.__version__}, {os.cpu_count()} CPU cores: "
        f"{args.rates} learning rates x {args.steps} Adam steps"
        + (", float64 (--x64)" if args.x64 else "")
    )
    rows: list[dict[str, Any]] = []
    with tqdm(
        total=3 * args.rates, desc="sweeping", unit="run", file=sys.stderr
    ) as bar:
        for name, way in WAYS.items():
            bar.set_postfix_str(name)
            with COUNTS.window():
                start = time.perf_counter()
                curves = way(rates, args.steps, data, bar)
                elapsed = time.perf_counter() - start
            rows.append(
                {
                    "way": name,
                    "traces": COUNTS.traces,
                    "compiles": COUNTS.compiles,
                    "time": elapsed,
                    "curves": curves,
                }
            )
    for r in rows:
        plain = rows[0]["curves"]
        r["delta"] = float(np.max(np.abs(r["curves"] - plain) / np.abs(plain)))
    print(table(rows))
    print(NUMERICS_X64 if args.x64 else NUMERICS)
    plot(rates, rows, args.out)
    print(f"loss curves and times: {args.out}")
    if getattr(args, "processes", False):
        print("\nThe sweep as separate processes, with jax.jit and with lift.jit:")
        subprocess.run(
            [
                sys.executable,
                str(processes),
                "--points",
                str(args.rates),
                "--steps",
                str(args.steps),
            ],
            check=True,
        )
    return rows


if __name__ == "__main__":
    main()
