"""Every optax optimizer that takes a learning rate, lifted.

For each alias, with the rate as a Python float and as an array: the lifted
optimizer's updates equal plain optax's over several steps, three rates go
through one jitted step with a single trace, and the lowered program takes the
rate as a parameter instead of baking it in as a constant.

Float hyperparameters become float32 run-time values when lifted, where plain
optax folds them as Python constants, hence the tolerances (FINDINGS: `1 - 0.999`
in float32 is off by 1.3e-5 relative).

Optax code that branches in Python on a float hyperparameter, and what lift does:

- `optax.sm3` (`scale_by_sm3`): `(1.0 - b2) if b2 != 1.0 else 1.0`. lift sees
  `b2` feeding a Python branch in the bytecode and keeps it static, so
  `lift(optax.sm3(lr))` works by default and `b2` is part of the treedef
  (`test_sm3_keeps_b2_static` pins this). No other alias here keeps a float
  capture static (`test_only_sm3_keeps_a_float_static`).
- `optax.cosine_decay_schedule` rebinds `nonlocal decay_steps` (an int, so
  static): the lifted copy rebinds its own cell (`test_schedules`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import TraceCounter

import lift

RATES = (0.01, 0.003, 0.001)
STEPS = 4
RTOL, ATOL = 1e-4, 1e-5


def _noisy_sgd(lr: Any) -> optax.GradientTransformation:
    return optax.noisy_sgd(lr, key=jax.random.key(0))


def _lbfgs(lr: Any) -> optax.GradientTransformation:
    # The default zoom line search needs `value`, `grad` and `value_fn` in
    # `update`; with a fixed rate, lbfgs is an ordinary transformation.
    return optax.lbfgs(lr, linesearch=None)


def _sgd_momentum(lr: Any) -> optax.GradientTransformation:
    return optax.sgd(lr, momentum=0.9)


def _sgd_nesterov(lr: Any) -> optax.GradientTransformation:
    return optax.sgd(lr, momentum=0.9, nesterov=True)


ALIASES: dict[str, Callable[[Any], optax.GradientTransformation]] = {
    name: getattr(optax, name)
    for name in (
        "adabelief",
        "adadelta",
        "adafactor",
        "adagrad",
        "adam",
        "adamax",
        "adamaxw",
        "adamw",
        "adan",
        "amsgrad",
        "fromage",
        "lamb",
        "lars",
        "lion",
        "nadam",
        "nadamw",
        "novograd",
        "optimistic_adam_v2",
        "optimistic_gradient_descent",
        "radam",
        "rmsprop",
        "rprop",
        "sgd",
        "sign_sgd",
        "signum",
        "sm3",
        "yogi",
    )
}
ALIASES |= {
    "noisy_sgd": _noisy_sgd,
    "lbfgs": _lbfgs,
    "sgd_momentum": _sgd_momentum,
    "sgd_nesterov": _sgd_nesterov,
}
# optax.contrib: optimizers that take a learning rate and a plain `update`.
ALIASES |= {
    f"contrib.{name}": getattr(optax.contrib, name)
    for name in (
        "acprop",
        "ademamix",
        "adopt",
        "madgrad",
        "prodigy",
        "schedule_free_adamw",
        "schedule_free_sgd",
        "simplified_ademamix",
    )
}


# Compared with plain optax at every rate (the others at the first rate only,
# for time): the common optimizers.
_CHECK_EVERY_RATE = frozenset({"adam", "adamw", "sgd_momentum", "lion"})


def _rate(lr: float, kind: str) -> Any:
    return lr if kind == "float" else jnp.asarray(lr)


def _params() -> dict[str, jax.Array]:
    return {
        "w": jnp.linspace(-1.0, 1.0, 12).reshape(3, 4),
        "b": jnp.linspace(0.5, 1.0, 4),
    }


def _loss(p: dict[str, jax.Array]) -> jax.Array:
    return jnp.sum((p["w"] @ jnp.ones(4) - 1.0) ** 2) + jnp.sum(jnp.sin(p["b"]) ** 2)


def _step(opt: Any, p: Any, s: Any) -> tuple[Any, Any]:
    g = jax.grad(_loss)(p)
    u, s = opt.update(g, s, p)
    return optax.apply_updates(p, u), s


# The state of every optimizer of a sweep but the first: through one program
# (their treedefs are equal), where eager `init` under JAX's leak checker
# compiles each op afresh (about 2 s an optimizer on 2 busy cores).
_jit_init = jax.jit(lambda opt, p: opt.init(p))


def _init(opt: Any, p: Any, first: bool) -> Any:
    """`opt.init(p)`: eagerly, as a user calls it, for the first of a sweep."""
    return opt.init(p) if first else _jit_init(opt, p)


def _plain_run(opt: optax.GradientTransformation) -> Any:
    # Plain optax, run eagerly, as the reference. Without JAX's leak checking
    # (which bypasses its caches, so every eager op would compile again): it
    # checks nothing of lift's here, and the op-by-op programs are then shared
    # by every test.
    with jax.check_tracer_leaks(False):
        p = _params()
        s = opt.init(p)
        for _ in range(STEPS):
            p, s = _step(opt, p, s)
        return p


def _assert_close(got: Any, want: Any) -> None:
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_alias_lifted_equals_plain_and_traces_once(name: str) -> None:
    make = ALIASES[name]
    counter = TraceCounter()
    step = counter.jit(_step)
    # Python-float and array rates alike: both are weakly typed float32 leaves,
    # so all six optimizers share one program.
    for kind in ("float", "array"):
        for i, lr in enumerate(RATES):
            opt = lift.lift(make(_rate(lr, kind)))
            p = _params()
            s = _init(opt, p, first=kind == "float" and i == 0)
            for _ in range(STEPS):
                p, s = step(opt, p, s)
            if i == 0 or name in _CHECK_EVERY_RATE:
                _assert_close(p, _plain_run(make(_rate(lr, kind))))
    assert counter.traces == 1


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_alias_rate_is_a_parameter_not_a_constant(name: str) -> None:
    make = ALIASES[name]
    p = _params()

    def init_and_step(opt: Any, p: Any) -> Any:
        # With init: `rprop` uses the rate only to seed its state.
        return _step(opt, p, opt.init(p))

    def lowered(opt: Any, **jit_kwargs: Any) -> str:
        return jax.jit(init_and_step, **jit_kwargs).lower(opt, p).as_text()

    # Plain optax bakes the rate into the program (so the check below can fail)...
    assert lowered(make(0.0123456789), static_argnums=0) != lowered(
        make(0.5), static_argnums=0
    )
    # ...lifted, every rate lowers to the same text, the rate an argument.
    lifted = [lowered(lift.lift(make(lr))) for lr in (0.0123456789, 0.5)]
    assert lifted[0] == lifted[1]
    assert "0123456" not in lifted[0]  # 0.0123456789 prints as 0.0123456791


def _float_statics(tree: Any) -> list[tuple[str, Any]]:
    """(variable, value) of every float capture kept static, anywhere in `tree`.

    Reads the skeleton (the treedef's aux data) by duck typing: the public API
    has no listing of static captures at depth.
    """
    found: list[tuple[str, Any]] = []
    for x in jax.tree.leaves(tree, is_leaf=lift.is_lifted):
        if not lift.is_lifted(x):
            continue
        skeleton = jax.tree.structure(x).node_data()[1]
        for template in _templates(skeleton):
            for slot in template.slots:
                value = getattr(slot, "value", None)
                if type(slot).__name__ == "Static" and type(value) in (float, complex):
                    found.append((str(template.label.variable), value))
    return found


def _templates(skeleton: Any) -> list[Any]:
    return [template for node in skeleton.nodes for _, template in node.parts()]


def test_sm3_keeps_b2_static() -> None:
    # `scale_by_sm3` does `(1.0 - b2) if b2 != 1.0 else 1.0`.
    opt = lift.lift(optax.sm3(0.1))
    assert _float_statics(opt) == [("b2", 1.0)]
    # Another `b2` is another program, and `lift.diff` says which capture...
    why = lift.diff(
        lift.lift(optax.scale_by_sm3(b2=1.0)), lift.lift(optax.scale_by_sm3(b2=0.5))
    )
    assert why is not None
    assert "b2" in why
    # ...while `b1`, used only in arithmetic, stays a leaf.
    assert (
        lift.diff(
            lift.lift(optax.scale_by_sm3(b1=0.9)), lift.lift(optax.scale_by_sm3(b1=0.5))
        )
        is None
    )
    p = _params()
    s = opt.init(p)
    _assert_close(_step(opt, p, s), _step(optax.sm3(0.1), p, s))


def test_only_sm3_keeps_a_float_static() -> None:
    kept = {
        name: _float_statics(lift.lift(make(0.1)))
        for name, make in ALIASES.items()
        if _float_statics(lift.lift(make(0.1)))
    }
    assert kept == {"sm3": [("b2", 1.0)]}


# -- combinators ------------------------------------------------------------------


def _check_combinator(make: Callable[[Any], Any]) -> None:
    counter = TraceCounter()
    step = counter.jit(_step)
    for lr in RATES:
        opt = lift.lift(make(lr))
        p = _params()
        s = _init(opt, p, first=lr == RATES[0])
        for _ in range(STEPS):
            p, s = step(opt, p, s)
        _assert_close(p, _plain_run(make(lr)))
    assert counter.traces == 1


def test_chain() -> None:
    _check_combinator(
        lambda lr: optax.chain(
            optax.clip_by_global_norm(1.0), optax.adamw(lr, weight_decay=1e-2)
        )
    )


@pytest.mark.parametrize(
    "schedule",
    [
        lambda lr: optax.warmup_cosine_decay_schedule(
            0.0, lr, 2, 10, end_value=lr / 10
        ),
        lambda lr: optax.cosine_decay_schedule(lr, 10, alpha=0.1),
        lambda lr: optax.exponential_decay(lr, 2, 0.5),
        lambda lr: optax.linear_schedule(lr, lr / 10, 5),
        lambda lr: optax.piecewise_constant_schedule(lr, {2: 0.5}),
        lambda lr: optax.warmup_exponential_decay_schedule(0.0, lr, 2, 3, 0.5),
    ],
    ids=[
        "warmup_cosine_decay",
        "cosine_decay",
        "exponential_decay",
        "linear",
        "piecewise_constant",
        "warmup_exponential_decay",
    ],
)
def test_schedules(schedule: Callable[[float], Any]) -> None:
    _check_combinator(lambda lr: optax.adam(schedule(lr)))


def test_masked() -> None:
    _check_combinator(
        lambda lr: optax.chain(
            optax.adam(lr),
            optax.masked(optax.add_decayed_weights(lr), {"w": True, "b": False}),
        )
    )


def test_multi_transform() -> None:
    _check_combinator(
        lambda lr: optax.multi_transform(
            {"fast": optax.adam(lr), "slow": optax.sgd(lr / 10, momentum=0.9)},
            {"w": "fast", "b": "slow"},
        )
    )


def test_inject_hyperparams_inside_a_lifted_chain() -> None:
    _check_combinator(
        lambda lr: optax.chain(
            optax.clip(1.0),
            optax.inject_hyperparams(optax.adam)(learning_rate=lr, b1=0.8),
        )
    )


def test_multi_steps_compiles_once_and_diff_finds_nothing_static() -> None:
    # `MultiSteps.gradient_transformation()` returns bound methods of a
    # `MultiSteps` object, which is not a pytree: lift takes the object apart
    # (its attributes become captures), so the inner rate is a leaf, every rate
    # shares one program, and `lift.diff` finds no static difference.
    def make(lr: float) -> Any:
        return optax.MultiSteps(
            optax.adam(lr), every_k_schedule=2
        ).gradient_transformation()

    counter = TraceCounter()
    step = counter.jit(_step)
    for lr in RATES:
        opt = lift.lift(make(lr))
        p = _params()
        s = _init(opt, p, first=lr == RATES[0])
        for _ in range(STEPS):
            p, s = step(opt, p, s)
        _assert_close(p, _plain_run(make(lr)))
    assert counter.traces == 1
    assert lift.diff(lift.lift(make(0.1)), lift.lift(make(0.2))) is None
    # What does differ statically is named: here the number of mini-steps.
    other = lift.lift(
        optax.MultiSteps(optax.adam(0.1), every_k_schedule=3).gradient_transformation()
    )
    why = lift.diff(lift.lift(make(0.1)), other)
    assert why is not None
    assert "every_k_schedule = 2 vs 3" in why
