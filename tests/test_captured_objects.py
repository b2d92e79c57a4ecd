"""A lifted function acts on the objects its original captured (the contract's
rule for lists, dicts and sets): every holder with every consumer.

Each holder reaches a container by another way (captured directly, inside a
tuple or a dict, as a bound method's `self` attribute, as a partial's argument
or keyword, as a default, through a nested closure, as a function attribute),
with a static or a dynamic value beside it. Each consumer runs the lifted
function another way (eagerly, through `jax.jit`, `lift.jit`, `jax.vmap`, and
re-lifted until the shape's fast path would run). The code appends to the
container, fills it or counts in it: the change must reach the user's object.
A container that itself holds a dynamic leaf is rebuilt around it, so code
mutating it is refused when it is lifted, naming the variable and the fix,
never run on a silent copy.
"""

from __future__ import annotations

import dataclasses
import functools
import textwrap
from collections.abc import Callable
from typing import Any, Final

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lift
from lift import _replay

# How the function reaches its container (`{c}` in the code below), the code
# building it, and the variable a refusal names.
_HOLDERS: dict[str, tuple[str, str]] = {
    "cell": (
        "c",
        """
        def make(c, lr):
            def f(x):
                {mutate:c}
                return x * lr
            return f
        """,
    ),
    "tuple": (
        "state",
        """
        def make(c, lr):
            state = (c, lr)
            def f(x):
                {mutate:state[0]}
                return x * state[1]
            return f
        """,
    ),
    "dict": (
        "d",
        """
        def make(c, lr):
            d = {{"log": c, "lr": lr}}
            def f(x):
                {mutate:d["log"]}
                return x * d["lr"]
            return f
        """,
    ),
    "self": (
        "self",
        """
        class Obj:
            def __init__(self, c, lr):
                self.log = c
                self.lr = lr
            def f(self, x):
                {mutate:self.log}
                return x * self.lr
        def make(c, lr):
            return Obj(c, lr).f
        """,
    ),
    "pytree self": (
        "self",
        """
        @functools.partial(
            jax.tree_util.register_dataclass, data_fields=["log", "lr"], meta_fields=[]
        )
        @dataclasses.dataclass
        class Obj:
            log: Any
            lr: Any
            def f(self, x):
                {mutate:self.log}
                return x * self.lr
        def make(c, lr):
            return Obj(c, lr).f
        """,
    ),
    "partial argument": (
        "log",
        """
        def g(log, lr, x):
            {mutate:log}
            return x * lr
        def make(c, lr):
            return functools.partial(g, c, lr)
        """,
    ),
    "partial keyword": (
        "log",
        """
        def g(x, log, lr):
            {mutate:log}
            return x * lr
        def make(c, lr):
            return functools.partial(g, log=c, lr=lr)
        """,
    ),
    "default": (
        "log",
        """
        def make(c, lr):
            def f(x, log=c, lr=lr):
                {mutate:log}
                return x * lr
            return f
        """,
    ),
    "kwdefault": (
        "log",
        """
        def make(c, lr):
            def f(x, *, log=c, lr=lr):
                {mutate:log}
                return x * lr
            return f
        """,
    ),
    "nested closure": (
        "c",
        """
        def make(c, lr):
            def inner(x):
                {mutate:c}
                return x * lr
            def f(x):
                return inner(x)
            return f
        """,
    ),
    "function attribute": (
        "f",
        """
        def make(c, lr):
            def f(x):
                {mutate:f.log}
                return x * f.lr
            f.log = c
            f.lr = lr
            return f
        """,
    ),
}

# What the code does to its container, what the container starts as, and what
# it holds after one run.
_MUTATIONS: dict[str, tuple[str, Callable[[], Any], Any]] = {
    "append": ("{c}.append(1)", list, [1]),
    "fill": ("{c}['k'] = 1", dict, {"k": 1}),
    "count": ("{c}['n'] = {c}.get('n', 0) + 1", dict, {"n": 1}),
    "add": ("{c}.add(1)", set, {1}),
}


def _source(holder: str, mutation: str) -> str:
    template = textwrap.dedent(_HOLDERS[holder][1])
    code = _MUTATIONS[mutation][0]
    out: list[str] = []
    for line in template.splitlines():
        start = line.find("{mutate:")
        if start >= 0:
            end = line.index("}", start)
            target = line[start + len("{mutate:") : end]
            line = line[:start] + code.format(c=target)
        out.append(line.replace("{{", "{").replace("}}", "}"))
    return "\n".join(out)


_MAKERS: dict[tuple[str, str], Callable[[Any, Any], Any]] = {}


def _maker(holder: str, mutation: str) -> Callable[[Any, Any], Any]:
    """`make(c, lr)` for a holder and a mutation, its code compiled once (so
    that lifting closures it makes again and again meets the same code)."""
    key = (holder, mutation)
    if key not in _MAKERS:
        namespace: dict[str, Any] = {
            "functools": functools,
            "dataclasses": dataclasses,
            "jax": jax,
            "Any": Any,
        }
        exec(
            compile(_source(holder, mutation), f"<{holder} {mutation}>", "exec"),
            namespace,
        )
        _MAKERS[key] = namespace["make"]
    return _MAKERS[key]


def _eager(make: Any, c: Any, lr: Any) -> Any:
    return lift.lift(make(c, lr))(2.0)


def _jax_jit(make: Any, c: Any, lr: Any) -> Any:
    return jax.jit(lambda g, x: g(x))(lift.lift(make(c, lr)), 2.0)


def _lift_jit(make: Any, c: Any, lr: Any) -> Any:
    return lift.jit(make(c, lr))(2.0)


def _lift_jit_of_lifted(make: Any, c: Any, lr: Any) -> Any:
    return lift.jit(lift.lift(make(c, lr)))(2.0)


def _vmap(make: Any, c: Any, lr: Any) -> Any:
    out = jax.vmap(lambda g, x: g(x), in_axes=(None, 0))(
        lift.lift(make(c, lr)), jnp.full(3, 2.0)
    )
    assert np.allclose(out, out[0])
    return out[0]


_CONSUMERS: dict[str, Callable[[Any, Any, Any], Any]] = {
    "eager": _eager,
    "jax.jit": _jax_jit,
    "lift.jit": _lift_jit,
    "lift.jit of a Lifted": _lift_jit_of_lifted,
    "jax.vmap": _vmap,
}

_BESIDE: dict[str, Any] = {"static beside": 3, "dynamic beside": 3.0}


def _refused(holder: str, mutation: str) -> bool:
    """A list or dict that is a child of a registered pytree node is rebuilt
    with the node (whose unflatten may demand a container there), whatever it
    holds: mutating it is refused. A set is a leaf to JAX, kept whole."""
    return holder == "pytree self" and mutation != "add"


@pytest.mark.parametrize("beside", list(_BESIDE))
@pytest.mark.parametrize("consumer", list(_CONSUMERS))
@pytest.mark.parametrize("mutation", list(_MUTATIONS))
@pytest.mark.parametrize("holder", list(_HOLDERS))
def test_a_mutation_reaches_the_users_container(
    holder: str, mutation: str, consumer: str, beside: str
) -> None:
    make = _maker(holder, mutation)
    _, start, after = _MUTATIONS[mutation]
    lr = _BESIDE[beside]
    c = start()
    if _refused(holder, mutation):
        with pytest.raises(
            lift.LiftError,
            match=r"mutates the captured variable 'self' in place \(at `self.log`\), "
            r"a (list|dict) that sits in a pytree node",
        ):
            _CONSUMERS[consumer](make, c, lr)
        assert c == start()
        return
    out = _CONSUMERS[consumer](make, c, lr)
    assert c == after  # the user's own object, changed once (one trace)
    assert float(out) == 2.0 * lr


@pytest.mark.parametrize("beside", list(_BESIDE))
@pytest.mark.parametrize("mutation", list(_MUTATIONS))
@pytest.mark.parametrize("holder", list(_HOLDERS))
def test_a_mutation_reaches_each_users_container_when_relifted(
    holder: str, mutation: str, beside: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lifted more often than a shape needs for its fast path, with the checks
    # on and off: every lift acts on its own container.
    make = _maker(holder, mutation)
    _, start, after = _MUTATIONS[mutation]
    lr = _BESIDE[beside]
    for verify in (False, True):
        with lift.verifying(verify):
            for _ in range(_replay.REPLAY_AFTER + 3):
                c = start()
                if _refused(holder, mutation):
                    with pytest.raises(lift.LiftError, match="sits in a pytree node"):
                        lift.lift(make(c, lr))
                    continue
                assert float(lift.lift(make(c, lr))(2.0)) == 2.0 * lr
                assert c == after


# Containers that hold a dynamic leaf themselves: rebuilt, so mutating them is
# refused when lifted.
_DYNAMIC_CONTAINERS: dict[str, Callable[[], Any]] = {
    "append": lambda: [0.5],
    "fill": lambda: {"w": jnp.ones(2)},
    "count": lambda: {"w": np.float32(1.0)},
}


# (A plain object's container is the user's own: see the next test.)
_REBUILT_HOLDERS: Final = [h for h in _HOLDERS if h != "self"]


@pytest.mark.parametrize("consumer", list(_CONSUMERS))
@pytest.mark.parametrize("mutation", list(_DYNAMIC_CONTAINERS))
@pytest.mark.parametrize("holder", _REBUILT_HOLDERS)
def test_mutating_a_container_holding_a_dynamic_leaf_is_refused_when_lifted(
    holder: str, mutation: str, consumer: str
) -> None:
    make = _maker(holder, mutation)
    c = _DYNAMIC_CONTAINERS[mutation]()
    before = repr(c)
    name = _HOLDERS[holder][0]
    with pytest.raises(
        lift.LiftError,
        match=rf"mutates the captured variable '{name}' in place(?s:.*)Fix: pass '{name}' as an argument",
    ):
        _CONSUMERS[consumer](make, c, 3.0)
    assert repr(c) == before  # nothing ran on a copy


@pytest.mark.parametrize("mutation", list(_DYNAMIC_CONTAINERS))
def test_a_plain_object_holding_a_dynamic_container_is_the_users_own(
    mutation: str,
) -> None:
    # Not a pytree: the whole object is static, the container inside it the
    # user's, and mutating it works (lift never rebuilds it).
    make = _maker("self", mutation)
    c = _DYNAMIC_CONTAINERS[mutation]()
    lift.lift(make(c, 3.0))(2.0)
    assert (len(c) == 2) if mutation == "append" else (set(c) > {"w"})


@pytest.mark.parametrize("mutation", list(_DYNAMIC_CONTAINERS))
@pytest.mark.parametrize("holder", _REBUILT_HOLDERS)
def test_a_shape_lifted_often_still_refuses_a_dynamic_container(
    holder: str, mutation: str
) -> None:
    # The same code lifted past the fast path's threshold with containers of
    # static values (each the user's own), then with one holding a dynamic leaf.
    make = _maker(holder, mutation)
    _, start, _ = _MUTATIONS[mutation]
    for verify in (False, True):
        with lift.verifying(verify):
            for _ in range(_replay.REPLAY_AFTER + 2):
                if not _refused(holder, mutation):
                    lift.lift(make(start(), 3.0))
            with pytest.raises(lift.LiftError, match="mutates the captured variable"):
                lift.lift(make(_DYNAMIC_CONTAINERS[mutation](), 3.0))
