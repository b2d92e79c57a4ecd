"""Side effects on captured objects: a call that changes a copy lift rebuilt
is refused when it returns, naming the function, its `file:line` and the
variable, with the user's object untouched; a container holding no dynamic
leaf is the user's own object, which the call changes as plain Python would.

The matrix covers every pair of its axes (where the container sits, what it
is, which transform runs the call), not their product: `_PAIRS` is a covering
array in which each holder meets each container once and each consumer
through the Latin square `(holder + container) % 5`. Each case has a read
twin, never refused. Below it, the shapes past reviews found, each a named
regression test.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import operator
from collections.abc import Callable
from typing import Any, Self

import jax
import numpy as np
import pytest
from jax.experimental import io_callback

import lift

_RUN: dict[str, Callable[[Callable[..., Any]], Any]] = {
    "eager": lambda f: lift.lift(f)(2.0),
    "jax.jit": lambda f: jax.jit(lambda g, x: g(x))(lift.lift(f), 2.0),
    "lift.jit": lambda f: lift.jit(f)(2.0),
    "vmap": lambda f: jax.vmap(lift.lift(f))(np.full(1, 2.0))[0],
    "lax.scan": lambda f: jax.lax.scan(
        lambda c, _: (lift.lift(f)(c), None), 2.0, length=1
    )[0],
}
_CONSUMERS = list(_RUN)


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["w"], meta_fields=["calls"]
)
@dataclasses.dataclass
class _Model:
    w: Any
    calls: int = 0


def _add(r: list[Any]) -> None:
    r.append(1)


def _rename(o: Any) -> None:
    o.w2 = o.w


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class _Counted:
    w: Any
    log: list[Any]


class _Registered:
    """A registered class that takes attributes as `object` does."""

    def __init__(self, w: Any) -> None:
        self.w = w

    def __repr__(self) -> str:
        return f"_Registered({sorted(vars(self))})"


jax.tree_util.register_pytree_node(
    _Registered, lambda p: ((p.w,), None), lambda _, c: _Registered(*c)
)


class _FromW:
    """A registered class's flattening whose `tree_unflatten` is
    `cls(*children)`: the one child `w`, and whatever else `__init__` makes
    anew."""

    __slots__ = ()
    w: Any
    history: list[Any]

    def tree_flatten(self) -> tuple[tuple[Any], None]:
        return (self.w,), None

    @classmethod
    def tree_unflatten(cls, _: None, children: tuple[Any]) -> Self:
        return cls(*children)

    def remember(self, x: Any) -> Any:
        self.history.append(1)  # plain Python: m.history gains 1
        return x * self.w


@jax.tree_util.register_pytree_node_class
class _Remembering(_FromW):
    """A registered class whose `tree_unflatten` is `cls(*children)`: its
    `__init__` makes `history` and `state` anew, so a rebuilt one has its own."""

    def __init__(self, w: Any) -> None:
        self.w = w
        self.history: list[Any] = []
        self.state: dict[str, Any] = {"log": [], "seen": (set(),)}
        self.buffer = bytearray()

    def record(self, x: Any) -> Any:
        self.buffer.extend(b"x")  # plain Python: the bytes gain one
        return x * self.w

    def log(self, x: Any) -> Any:
        self.state["log"].append(1)  # plain Python: m.state['log'] gains 1
        return x * self.w

    def see(self, x: Any) -> Any:
        self.state["seen"][0].add(1)  # plain Python: the set gains 1
        return x * self.w

    def read(self, x: Any) -> Any:
        return x * self.w * (len(self.history) + len(self.state["log"]) + 1)

    def __repr__(self) -> str:
        return f"_Remembering({self.history}, {self.state}, {self.buffer!r})"


class _Shared:
    """Aux data (hashed by identity) through which a node's list is shared."""

    def __init__(self) -> None:
        self.items: list[Any] = []


@jax.tree_util.register_pytree_node_class
class _SharingHistory:
    """A registered class whose `history` comes back from its aux data: a
    rebuilt one shares your object's list."""

    def __init__(self, w: Any, shared: _Shared | None = None) -> None:
        self.w = w
        self.shared = _Shared() if shared is None else shared
        self.history = self.shared.items

    def tree_flatten(self) -> tuple[tuple[Any], _Shared]:
        return (self.w,), self.shared

    @classmethod
    def tree_unflatten(cls, shared: _Shared, children: tuple[Any]) -> _SharingHistory:
        return cls(*children, shared)

    def remember(self, x: Any) -> Any:
        self.history.append(1)  # plain Python: m.history gains 1
        return x * self.w

    def __repr__(self) -> str:
        return f"_SharingHistory({self.history})"


@jax.tree_util.register_pytree_node_class
class _Slotted(_FromW):
    """A registered class with `__slots__`, no `__dict__`: its attributes are
    slots, and its `__init__` makes `history` anew."""

    __slots__ = ("calls", "history", "w")

    def __init__(self, w: Any) -> None:
        self.w = w
        self.calls = 0
        self.history: list[Any] = []

    def __repr__(self) -> str:
        return f"_Slotted({self.calls}, {self.history})"


def _bump(o: Any) -> None:
    o.calls += 1


_DEFAULT_HISTORY: list[Any] = []


@jax.tree_util.register_pytree_node_class
class _DefaultHistory:
    """A registered class whose `history` is a default shared by every
    instance, rebuilt ones too."""

    def __init__(self, w: Any, history: list[Any] = _DEFAULT_HISTORY) -> None:
        self.w = w
        self.history = history

    def tree_flatten(self) -> tuple[tuple[Any], None]:
        return (self.w,), None

    @classmethod
    def tree_unflatten(cls, _: None, children: tuple[Any]) -> _DefaultHistory:
        return cls(*children)

    def remember(self, x: Any) -> Any:
        self.history.append(1)  # plain Python: the shared list gains 1
        return x * self.w

    def __repr__(self) -> str:
        return f"_DefaultHistory({self.history})"


@jax.tree_util.register_pytree_node_class
class _Cached(_FromW):
    """A registered class with a `functools.cached_property`: reading it
    stores its value in the instance's `__dict__`."""

    def __init__(self, w: Any) -> None:
        self.w = w

    @functools.cached_property
    def double(self) -> Any:
        return self.w * 2

    def __repr__(self) -> str:
        return f"_Cached({self.w}, cached={'double' in vars(self)})"


# -- the matrix: holder x container x consumer, pairwise -------------------------

# A container: how to make one holding a float (so lift rebuilds it around its
# leaf), how code changes it, and how code reads it (the float).
_Container = tuple[Callable[[], Any], Callable[[Any], None], Callable[[Any], Any]]


def _count(d: Any) -> None:
    d["n"] += 1


_CONTAINERS: dict[str, _Container] = {
    "list": (lambda: [0.5], lambda c: c.append(1), lambda c: c[0]),
    "dict": (lambda: {"w": 0.5}, lambda c: c.update(k=1), lambda c: c["w"]),
    "OrderedDict": (
        lambda: collections.OrderedDict(w=0.5),
        lambda c: c.move_to_end("w", last=False) or c.update(k=1),
        lambda c: c["w"],
    ),
    # Reading the path to it must not add keys either (`counts['n']` would).
    "defaultdict": (
        lambda: collections.defaultdict(int, w=0.5),
        _count,
        lambda c: c["w"],
    ),
    "registered dataclass": (
        lambda: _Model(np.float32(0.5)),
        lambda m: setattr(m, "calls", m.calls + 1),
        lambda m: m.w * (m.calls + 1),
    ),
}


@jax.tree_util.register_pytree_node_class
class _Box:
    """A registered class holding the container as its child: `lift(b.run)`
    captures it through the bound method's object."""

    def __init__(self, c: Any, body: Callable[[Any, Any], Any]) -> None:
        self.c, self.body = c, body

    def tree_flatten(self) -> tuple[tuple[Any], Any]:
        return (self.c,), self.body

    @classmethod
    def tree_unflatten(cls, body: Any, children: tuple[Any]) -> _Box:
        return cls(children[0], body)

    def run(self, x: Any) -> Any:
        return self.body(self.c, x)


def _apply(body: Callable[[Any, Any], Any], c: Any, x: Any) -> Any:
    return body(c, x)


def _in_a_cell(c: Any, body: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def step(x: Any) -> Any:
        return body(c, x)

    return step


def _in_a_default(c: Any, body: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def step(x: Any, c: Any = c) -> Any:
        return body(c, x)

    return step


def _in_a_dict(c: Any, body: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    state = {"c": c, "lr": 1.0}

    def step(x: Any) -> Any:
        return body(state["c"], x) * state["lr"]

    return step


def _in_an_attribute(c: Any, body: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def helper(x: Any) -> Any:
        return x

    helper.c = c  # type: ignore[attr-defined]

    def step(x: Any) -> Any:
        return body(helper.c, helper(x))  # type: ignore[attr-defined]

    return step


def _in_a_partial(c: Any, body: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    return functools.partial(_apply, body, c)


def _in_a_method(c: Any, body: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    return _Box(c, body).run


def _in_a_captured_method(
    c: Any, body: Callable[[Any, Any], Any]
) -> Callable[..., Any]:
    fns = {"run": _Box(c, body).run}

    def step(x: Any) -> Any:
        return fns["run"](x)

    return step


# A holder: how to make the function to lift around the container, the name
# of the function a refusal names, and how it names the variable.
_HOLDERS: dict[str, tuple[Callable[..., Callable[..., Any]], str, str]] = {
    "cell": (_in_a_cell, "_in_a_cell.<locals>.step", "variable 'c'"),
    "default": (_in_a_default, "_in_a_default.<locals>.step", "variable 'c'"),
    "dict in a cell": (_in_a_dict, "_in_a_dict.<locals>.step", "variable 'state'"),
    "attribute of a captured function": (
        _in_an_attribute,
        "_in_an_attribute.<locals>.step",
        "variable 'helper' (at `helper.c`)",
    ),
    "partial's argument": (_in_a_partial, "_apply", "capture `args[1]`"),
    "bound method's object": (_in_a_method, "_Box.run", "variable 'self'"),
    "captured bound method's object": (
        _in_a_captured_method,
        "_in_a_captured_method.<locals>.step",
        "variable 'fns' (at `fns['run'].__self__`)",
    ),
}

_PAIRS = [
    pytest.param(holder, container, _CONSUMERS[(h + k) % len(_CONSUMERS)])
    for h, holder in enumerate(_HOLDERS)
    for k, container in enumerate(_CONTAINERS)
]


def _mutating(container: str) -> Callable[[Any, Any], Any]:
    _, change, read = _CONTAINERS[container]

    def body(c: Any, x: Any) -> Any:
        change(c)
        return x * read(c)

    return body


def _reading(container: str) -> Callable[[Any, Any], Any]:
    read = _CONTAINERS[container][2]
    return lambda c, x: x * read(c)


@pytest.mark.parametrize(("holder", "container", "consumer"), _PAIRS)
def test_a_call_that_changes_a_copy_is_refused_when_it_returns(
    holder: str, container: str, consumer: str
) -> None:
    make, name, variable = _HOLDERS[holder]
    new = _CONTAINERS[container][0]
    mine = new()
    make(mine, _mutating(container))(2.0)  # plain Python changes it
    assert repr(mine) != repr(new())
    mine = new()
    before = repr(mine)
    with pytest.raises(lift.LiftError, match=r"in place while it ran") as info:
        _RUN[consumer](make(mine, _mutating(container)))
    text = str(info.value)
    assert text.startswith(f"{name} ({__file__}:"), text  # function, file:line
    assert variable in text, text
    assert "Fix: pass" in text, text
    assert repr(mine) == before  # the user's object: untouched


@pytest.mark.parametrize(("holder", "container", "consumer"), _PAIRS)
def test_a_read_of_the_same_copy_is_not_refused(
    holder: str, container: str, consumer: str
) -> None:
    make = _HOLDERS[holder][0]
    new = _CONTAINERS[container][0]
    expected = make(new(), _reading(container))(2.0)
    mine = new()
    before = repr(mine)
    assert np.allclose(_RUN[consumer](make(mine, _reading(container))), expected)
    assert repr(mine) == before


# A container without a dynamic leaf is the user's own, in each holder that
# keeps it so; each consumer runs the body once (a transform, when it traces).
_OWN = [
    pytest.param(holder, consumer)
    for holder, consumer in zip(
        ["cell", "default", "dict in a cell", "partial's argument", "cell"],
        _CONSUMERS,
        strict=True,
    )
]


@pytest.mark.parametrize(("holder", "consumer"), _OWN)
def test_a_container_without_dynamic_leaves_is_the_users_own(
    holder: str, consumer: str
) -> None:
    make = _HOLDERS[holder][0]
    log: list[Any] = ["a"]

    def body(c: Any, x: Any) -> Any:
        c.append("b")
        return x * 2

    _RUN[consumer](make(log, body))
    assert log == ["a", "b"]


# -- regressions: shapes past reviews found ------------------------------------


def _via_users_function(c: Any) -> None:
    _add(c["log"])


# Ways to reach a copy that the bytecode reading of earlier versions had to be
# taught one by one; the call sees each alike. Each runs under one consumer,
# in turn.
_SPELLINGS: dict[str, Callable[[Any], None]] = {
    "getattr(log, 'append')(1)": lambda s: getattr(s["log"], "append")(1),  # noqa: B009
    "type(log).append(log, 1)": lambda s: type(s["log"]).append(s["log"], 1),
    "log.__class__.append(log, 1)": lambda s: s["log"].__class__.append(s["log"], 1),
    "log.__imul__(2)": lambda s: s["log"].__imul__(2),
    "list.__imul__(log, 2)": lambda s: list.__imul__(s["log"], 2),
    "[*rows][0].append(1)": lambda s: [*[s["log"]]][0].append(1),  # noqa: RUF015
    "{**d}[k].append(1)": lambda s: {**s}["log"].append(1),
    "[[log]][0][0].append(1)": lambda s: [[s["log"]]][0][0].append(1),
    "[x.append(1) for x in [log]]": lambda s: [x.append(1) for x in [s["log"]]],
    "for _, x in enumerate([log]): x.append(1)": lambda s: [
        x.append(1) for _, x in enumerate([s["log"]])
    ],
    "{'a': log}.get('a').append(1)": lambda s: {"a": s["log"]}.get("a").append(1),
    "max(rows, key=len).append(1)": lambda s: max([[], s["log"]], key=len).append(1),
    "list(r for r in rows)[0].append(1)": lambda s: list(r for r in [s["log"]])[  # noqa: RUF015
        0
    ].append(1),
    "dict(log=log)['log'].append(1)": lambda s: dict(log=s["log"])["log"].append(1),
    "operator.getitem(state, k).append(1)": lambda s: operator.getitem(s, "log").append(
        1
    ),
    "add(state[k]), a function of the module": _via_users_function,
    "del state[k]": lambda s: s.pop("log"),
}


def _match_mapping(s: Any) -> None:
    match s:
        case {"log": log}:
            log.append(1)


def _through_an_exception(s: Any) -> None:
    try:
        raise ValueError(s["log"])
    except ValueError as e:
        e.args[0].append(1)


def _inner_closure_over_alias(s: Any) -> None:
    log = s["log"]

    def add() -> None:
        log.append(1)

    add()


_SPELLINGS |= {
    "match state: case {'log': log}: log.append(1)": _match_mapping,
    "raise E(state[k]) ... e.args[0].append(1)": _through_an_exception,
    "log = state[k]; def add(): log.append(1)": _inner_closure_over_alias,
}


@pytest.mark.parametrize(
    ("spelling", "consumer"),
    [(s, _CONSUMERS[i % len(_CONSUMERS)]) for i, s in enumerate(_SPELLINGS)],
)
def test_every_spelling_of_a_change_is_refused(spelling: str, consumer: str) -> None:
    change = _SPELLINGS[spelling]

    def make() -> tuple[Callable[..., Any], dict[str, Any]]:
        state: dict[str, Any] = {"log": [0.5], "w": 0.5}

        def step(x: Any) -> Any:
            change(state)
            return x * state.get("w", 1.0)

        return step, state

    step, state = make()
    step(2.0)
    assert state != make()[1]  # plain Python changes it
    step, state = make()
    with pytest.raises(
        lift.LiftError, match=r"step .* mutated the captured variable 'state'"
    ):
        _RUN[consumer](step)
    assert state == {"log": [0.5], "w": 0.5}


def test_a_defaultdict_copy_gains_no_key_when_read_through() -> None:
    # Rebuilt (it holds a float): a read of a missing key adds it to lift's
    # copy, which plain Python would add to yours. Refused, yours untouched.
    state = {"w": 0.5, "rates": collections.defaultdict(float, {"a": 0.5})}

    def step(x: Any) -> Any:
        return x * state["w"] + state["rates"]["b"]  # plain Python: adds 'b'

    with pytest.raises(lift.LiftError, match=r"variable 'state'"):
        lift.lift(step)(2.0)
    assert dict(state["rates"]) == {"a": 0.5}


def test_a_rebuilt_defaultdicts_factory_set_is_refused() -> None:
    counts: collections.defaultdict[str, Any] = collections.defaultdict(int, lr=0.5)

    def step(x: Any) -> Any:
        counts.default_factory = list
        return x * counts["lr"]

    with pytest.raises(lift.LiftError, match=r"variable 'counts'.*a defaultdict"):
        lift.lift(step)(2.0)
    assert counts.default_factory is int


def test_an_attribute_store_on_a_registered_dataclass_is_refused() -> None:
    m = _Model(np.float32(1.0))

    def step(x: Any) -> Any:
        m.calls += 1
        setattr(m, "calls", m.calls + 1)  # noqa: B010
        return x * m.w

    for run in (_RUN["eager"], _RUN["jax.jit"]):
        with pytest.raises(
            lift.LiftError, match=r"variable 'm' in place while it ran: a _Model"
        ):
            run(step)
    assert m.calls == 0


def test_a_change_made_by_a_users_function_on_a_node_is_refused() -> None:
    for m, change in (
        (_Counted(np.float32(1.0), [0.5]), lambda m: _add(m.log)),
        (_Registered(np.float32(1.0)), _rename),
        (_Slotted(np.float32(1.0)), _bump),
    ):
        before = repr(m)

        def step(x: Any, m: Any = m, change: Any = change) -> Any:
            change(m)
            return x * m.w

        with pytest.raises(lift.LiftError, match=r"variable 'm'"):
            lift.lift(step)(2.0)
        assert repr(m) == before


@pytest.mark.parametrize(
    ("method", "attribute"),
    [
        ("remember", "history"),
        ("log", "state"),
        ("see", "state"),
        ("record", "buffer"),
    ],
)
def test_a_container_a_nodes_unflatten_makes_anew_is_refused(
    method: str, attribute: str
) -> None:
    m = _Remembering(np.float32(1.0))
    before = repr(m)
    with pytest.raises(
        lift.LiftError,
        match=rf"variable 'self'.*its attribute `{attribute}` holds a",
    ):
        lift.lift(getattr(m, method))(2.0)
    assert repr(m) == before
    s = _Slotted(np.float32(1.0))  # a slot, not a `__dict__` entry
    with pytest.raises(lift.LiftError, match=r"attribute `history`"):
        lift.lift(s.remember)(2.0)
    assert s.history == []


@pytest.mark.parametrize("consumer", ["eager", "jax.jit"])
def test_a_container_a_rebuilt_node_shares_is_changed_not_refused(
    consumer: str,
) -> None:
    for make in (
        lambda: _SharingHistory(np.float32(1.0)),
        _default_history,
    ):
        m = make()
        _RUN[consumer](m.remember)
        assert m.history == [1]


def _default_history() -> _DefaultHistory:
    _DEFAULT_HISTORY.clear()
    return _DefaultHistory(np.float32(1.0))


def test_a_cached_property_read_on_a_node_copy_is_not_refused() -> None:
    c = _Cached(np.float32(1.0))

    def step(x: Any) -> Any:
        return x * c.double

    for run in _RUN.values():
        assert np.allclose(run(step), 4.0)
    assert "double" not in vars(c)


def test_a_partial_of_a_builtin_mutator_is_refused_without_printing_the_copy() -> None:
    buf = [0.5]
    with pytest.raises(
        lift.LiftError,
        match=r"^functools\.partial\(list\.append, …\) mutated its capture `args\[0\]`",
    ):
        lift.lift(functools.partial(list.append, buf))(1)
    assert buf == [0.5]

    push = functools.partial(list.append, buf)

    def step(x: Any) -> Any:
        push(1)
        return x * 2

    with pytest.raises(
        lift.LiftError, match=r"variable 'push' \(at `push\.args\[0\]`\)"
    ):
        lift.lift(step)(2.0)
    assert buf == [0.5]


def _varargs(*args: Any) -> Any:
    args[0].append(1)
    return args[-1] * 2


def _varkw(x: Any, **kw: Any) -> Any:
    kw["log"].append(1)
    return x * 2


def test_a_partials_argument_passed_to_star_args_or_star_star_kw_is_refused() -> None:
    for f, capture in (
        (functools.partial(_varargs, [0.5]), r"capture `args\[0\]`"),
        (functools.partial(_varkw, log=[0.5]), r"variable 'log'"),
    ):
        with pytest.raises(lift.LiftError, match=capture):
            lift.lift(f)(2.0)


def test_a_captured_functions_attribute_changed_through_a_list_is_refused() -> None:
    def helper(x: Any) -> Any:
        return x

    helper.log = [0.5]  # type: ignore[attr-defined]
    fns = [helper]

    def step(x: Any) -> Any:
        fns[0].log.append(1)  # type: ignore[attr-defined]
        return x * 2

    with pytest.raises(
        lift.LiftError, match=r"step .* variable 'fns' \(at `fns\[0\]\.log`\)"
    ):
        lift.lift(step)(2.0)
    assert helper.log == [0.5]  # type: ignore[attr-defined]


def _counting(lr: float) -> Any:
    def step(x: Any) -> Any:
        step.calls = step.calls + 1  # type: ignore[attr-defined]
        return x * lr

    step.calls = 0  # type: ignore[attr-defined]
    return step


@pytest.mark.parametrize(
    "run",
    [lambda g: g(2.0), lambda g: jax.jit(lambda h, x: h(x))(g, 2.0)],
    ids=["eager", "jit"],
)
def test_a_function_that_sets_its_own_attribute_is_refused(run: Any) -> None:
    # Regression: the attribute was set on lift's rebuilt function, and the
    # user's count stayed 0 without a word.
    step = _counting(0.5)
    with pytest.raises(
        lift.LiftError,
        match=(
            r"^_counting\.<locals>\.step \(.*:\d+\) set its attribute 'calls' "
            r"while it ran: .*\nFix: .*`step\.calls\[0\] \+= 1`"
        ),
    ):
        run(lift.lift(step))
    assert step.calls == 0  # type: ignore[attr-defined]
    assert step(2.0) == 1.0 and step.calls == 1  # type: ignore[attr-defined]


def test_a_functions_attribute_changed_in_place_reaches_the_users() -> None:
    # The fix the refusal gives: a list attribute without arrays or floats is
    # the user's own object inside the lifted function.
    def step(x: Any) -> Any:
        step.calls[0] += 1  # type: ignore[attr-defined]
        return x * 2

    step.calls = [0]  # type: ignore[attr-defined]
    lifted = lift.lift(step)
    assert lifted(1.0) == 2.0 and lifted(2.0) == 4.0
    assert step.calls == [2]  # type: ignore[attr-defined]


def test_a_wrapped_function_is_not_watched_for_its_attributes() -> None:
    # `functools.wraps` gives every decorated function attributes
    # (`__wrapped__`): not watched, so its calls take no check.
    def inner(x: Any) -> Any:
        return x * 2

    @functools.wraps(inner)
    def outer(x: Any) -> Any:
        return inner(x)

    lifted = lift.lift(outer)
    assert lifted(1.0) == 2.0
    assert lifted._built is not None and lifted._built.copies == ()  # pyright: ignore[reportPrivateUsage]


def test_a_captured_numpy_array_written_in_place_never_changes_silently() -> None:
    # Made a leaf: under a transform a tracer, which JAX refuses to write.
    def make() -> tuple[Callable[..., Any], Any]:
        buf = np.zeros(3)

        def step(x: Any) -> Any:
            buf[0] = 1.0
            return x * 2

        return step, buf

    for consumer in ("jax.jit", "lift.jit"):
        step, buf = make()
        with pytest.raises(TypeError, match=r"immutable|does not support item"):
            _RUN[consumer](step)
        assert buf[0] == 0.0


def test_a_refusal_holds_when_an_equal_shape_was_lifted_before() -> None:
    def counter_of(c: Any) -> Callable[[Any], Any]:
        def step(x: Any) -> Any:
            c["n"] += 1
            return x * 2

        return step

    for verify in (False, True):
        with lift.verifying(verify):
            for _ in range(12):
                own = {"n": 0}
                lift.lift(counter_of(own))(2.0)
                assert own == {"n": 1}
            for _ in range(12):
                c = {"n": 0, "w": 0.5}  # a float: rebuilt
                with pytest.raises(lift.LiftError, match="variable 'c'"):
                    lift.lift(counter_of(c))(2.0)
                assert c == {"n": 0, "w": 0.5}
            for _ in range(12):
                m = _Remembering(np.float32(1.0))
                with pytest.raises(lift.LiftError, match="attribute `history`"):
                    lift.lift(m.remember)(2.0)
                assert m.history == []


@pytest.mark.parametrize("consumer", _CONSUMERS)
def test_a_defaultdict_or_ordereddict_without_dynamic_leaves_is_the_users_own(
    consumer: str,
) -> None:
    # Regression: `collections.defaultdict(list)` (a history) and an empty
    # `OrderedDict` (a cache), dicts holding no dynamic leaf, were rebuilt:
    # filling them was refused, where a plain dict is your own object.
    history: collections.defaultdict[str, list[int]] = collections.defaultdict(list)
    seen: collections.OrderedDict[str, int] = collections.OrderedDict()
    counts: collections.defaultdict[str, int] = collections.defaultdict(int)

    def step(x: Any) -> Any:
        history["calls"].append(1)
        seen["step"] = len(seen)
        counts["n"] += 1
        return x * 2

    assert float(_RUN[consumer](step)) == 4.0
    assert history == {"calls": [1]} and seen == {"step": 0} and counts == {"n": 1}
    # Its factory and contents are the key, as a plain dict's contents are.
    empty = lift.lift(_reader(collections.defaultdict(list)))
    assert lift.diff(empty, lift.lift(_reader(collections.defaultdict(list)))) is None
    assert lift.diff(empty, lift.lift(_reader(collections.defaultdict(set))))


def test_a_nested_defaultdict_without_dynamic_leaves_is_the_users_own() -> None:
    state = {"lr": 0.5, "history": collections.defaultdict(list)}

    def step(x: Any) -> Any:
        state["history"]["loss"].append(1)  # as `{}.setdefault(...)` would
        return x * state["lr"]

    assert float(lift.lift(step)(2.0)) == 1.0
    assert state["history"] == {"loss": [1]}


def _reader(d: Any) -> Callable[[Any], Any]:
    return lambda x: x * len(d)


def test_a_partial_of_a_builtin_reader_or_over_an_own_list_is_not_refused() -> None:
    assert lift.lift(functools.partial(len, [0.5, 1.5]))() == 2
    assert lift.lift(functools.partial(list.index, [0.5, 1.5]))(1.5) == 1
    own = ["a"]  # no leaf: the user's own list
    lift.lift(functools.partial(list.append, own))("b")
    assert own == ["a", "b"]


def test_a_read_of_a_captured_numpy_array_is_not_refused() -> None:
    def make() -> Callable[..., Any]:
        buf = np.zeros(3)
        d = {"a": np.ones(2)}

        def step(x: Any) -> Any:
            return x * buf[0] + buf.sum() + d["a"][0]

        return step

    for run in _RUN.values():
        assert np.allclose(run(make()), 1.0)


def _logging_state() -> tuple[Callable[[Any], Any], dict[str, Any]]:
    state: dict[str, Any] = {"w": 1.0, "log": [0.5]}

    def add(log: list[Any], x: Any) -> None:  # not read: called, so seen by the call
        log.append(x)

    def step(x: Any) -> Any:
        add(state["log"], 1)
        if x > 0:
            raise ValueError("boom")
        return x * state["w"]

    return step, state


def test_a_call_that_raises_after_changing_a_copy_is_refused() -> None:
    # plain Python: the log gains 1, then ValueError. Lifted, the change
    # reached a copy: refused, the ValueError chained, not raised alone.
    step, state = _logging_state()
    with pytest.raises(ValueError, match="boom"):
        step(1.0)
    assert state["log"] == [0.5, 1]

    step, state = _logging_state()
    lifted = lift.lift(step)
    with pytest.raises(
        lift.LiftError, match=r"step .* mutated the captured variable 'state'"
    ) as info:
        lifted(1.0)
    assert isinstance(info.value.__cause__, ValueError)
    assert state["log"] == [0.5]
    # Not carried into the next call: it builds the function afresh.
    with pytest.raises(lift.LiftError, match="mutated the captured variable 'state'"):
        lifted(-1.0)
    assert state["log"] == [0.5]


def test_a_copy_given_out_and_changed_is_refused_as_changed_between_calls() -> None:
    state: dict[str, Any] = {"w": 1.0, "log": [0.5]}

    def read(x: Any) -> Any:
        return state["log"]

    lifted = lift.lift(read)
    out = lifted(1.0)
    assert lifted(1.0) == out  # reading again is not refused
    out.append(9)
    with pytest.raises(
        lift.LiftError,
        match=r"copy of the captured variable 'state' of .*read .* changed between two calls",
    ) as info:
        lifted(1.0)
    assert "mutated" not in str(info.value)  # the function is not blamed
    assert state["log"] == [0.5]
    # The copies were dropped: the next call is built afresh and runs.
    assert len(lifted(1.0)) == 1


# -- what a traced call leaves holding a copy: refused when it returns ----------


def _loss_logger(losses: list[Any], how: str) -> Callable[..., Any]:
    def record(v: Any) -> Any:
        losses.append(float(v))
        return np.zeros((), np.float32)

    def step(x: Any) -> Any:
        loss = x * 0.5
        if how == "debug":
            jax.debug.callback(record, loss)
        elif how == "a lambda":
            jax.debug.callback(lambda v: losses.append(float(v)), loss)
        elif how == "io":
            io_callback(
                record, jax.ShapeDtypeStruct((), np.float32), loss, ordered=True
            )
        else:
            loss = loss + jax.pure_callback(
                record, jax.ShapeDtypeStruct((), np.float32), loss
            )
        return loss

    return step


_TRACED = {
    "jax.jit": lambda f: jax.jit(lambda g, x: g(x))(lift.lift(f), 2.0),
    "lift.jit": lambda f: lift.jit(f)(2.0),
}


@pytest.mark.parametrize(
    ("consumer", "how"),
    [
        ("jax.jit", "debug"),
        ("lift.jit", "io"),
        ("jax.jit", "pure"),
        ("lift.jit", "a lambda"),
    ],
)
def test_a_callback_kept_in_the_program_holding_a_copy_is_refused(
    consumer: str, how: str
) -> None:
    # A loss log a callback fills, lifted again once it holds floats: rebuilt,
    # so the callback JAX keeps in the program would append to lift's copy at
    # run time, where no check sees it; the user's log would stop growing.
    losses: list[Any] = [1.5]
    with pytest.raises(
        lift.LiftError,
        match=r"(?s)step \(.*\) gave a callback .* a function holding lift's copy "
        r"of the captured variable 'losses'( of _loss_logger.<locals>.record \(.*\))?: "
        r"a list that lift rebuilds .*Fix: record through a function that does not "
        r"capture it",
    ):
        _TRACED[consumer](_loss_logger(losses, how))
    jax.effects_barrier()
    assert losses == [1.5]
    # Empty, the log is the user's own object: the callback fills it.
    losses.clear()
    _TRACED[consumer](_loss_logger(losses, how))
    jax.effects_barrier()
    assert losses == [1.0]


@pytest.mark.parametrize("consumer", ["one jax.jit", "lift.jit"])
def test_a_callback_fills_the_log_of_the_closure_called(consumer: str) -> None:
    # Two closures of one code, each over an empty log of its own: the plain
    # functions under `jax.jit` fill each its own log. The two logs are equal
    # when lifted, and the first program's callback holds the first log: the
    # second closure gets a program of its own.
    call = jax.jit(lambda g, x: g(x))
    first: list[Any] = []
    second: list[Any] = []
    for log in (first, second):
        step = _loss_logger(log, "debug")
        if consumer == "lift.jit":
            lift.jit(step)(2.0)
        else:
            call(lift.lift(step), 2.0)
    jax.effects_barrier()
    assert (first, second) == ([1.0], [1.0])


_READS: dict[str, Callable[[list[Any]], Callable[..., Any]]] = {
    "lax.scan": lambda log: (
        lambda x: jax.lax.scan(lambda c, _: (c * log[0], None), x, None, length=2)[0]
    ),
    "lax.fori_loop": lambda log: (
        lambda x: jax.lax.fori_loop(0, 2, lambda i, c: c * log[0], x)
    ),
    "lax.cond": lambda log: (
        lambda x: jax.lax.cond(x > 0, lambda y: y * log[0], lambda y: y, x)
    ),
    "checkpoint": lambda log: lambda x: jax.checkpoint(lambda y: y * log[0])(x),
    "grad": lambda log: lambda x: jax.grad(lambda y: y * log[0])(x) * x,
    "jit": lambda log: lambda x: jax.jit(lambda y: y * log[0])(x),
    "a closure it returns": lambda log: lambda x: lambda: x * log[0],
}


@pytest.mark.parametrize("inner", sorted(_READS))
def test_functions_a_traced_call_makes_and_drops_are_not_refused(inner: str) -> None:
    # The clean twin: functions made while the call is traced that read the
    # copy and are gone when it returns (or are returned) hold nothing after it.
    def outer(g: Any, x: Any) -> Any:
        out = g(x)
        return out() if callable(out) else out

    expected = outer(_READS[inner]([2.0]), 3.0)
    lifted = lift.lift(_READS[inner]([2.0]))
    assert jax.jit(outer)(lifted, 3.0) == expected


# -- generators and coroutines: checked when their body finishes ---------------


def _logging_generator() -> tuple[Callable[..., Any], dict[str, Any]]:
    state: dict[str, Any] = {"lr": 0.5, "log": [0.5]}

    def gen(x: Any) -> Any:
        _add(state["log"])  # not read: called, so seen by the call
        yield x * state["lr"]
        yield x

    return gen, state


def test_a_generator_that_changes_a_copy_is_refused_when_its_body_finishes() -> None:
    gen, state = _logging_generator()
    assert list(gen(2.0)) == [1.0, 2.0]
    assert state["log"] == [0.5, 1]

    gen, state = _logging_generator()
    lifted = lift.lift(gen)
    it = lifted(2.0)  # its body has not run
    with pytest.raises(
        lift.LiftError, match=r"gen .* mutated the captured variable 'state'"
    ):
        list(it)
    assert state["log"] == [0.5]
    # The next call is refused as its own, not as a change between two calls.
    with pytest.raises(lift.LiftError, match="mutated the captured variable 'state'"):
        list(lifted(2.0))
    # Closed before it is exhausted: refused by `close()`.
    it = lifted(2.0)
    assert next(it) == 1.0
    with pytest.raises(lift.LiftError, match="mutated the captured variable 'state'"):
        it.close()
    assert state["log"] == [0.5]


def test_coroutines_and_async_generators_that_change_a_copy_are_refused() -> None:
    state: dict[str, Any] = {"lr": 0.5, "log": [0.5]}

    async def step(x: Any) -> Any:
        _add(state["log"])
        return x * state["lr"]

    async def stream(x: Any) -> Any:
        _add(state["log"])
        yield x * state["lr"]

    async def collect(agen: Any) -> list[Any]:
        return [v async for v in agen]

    lifted = lift.lift(step)
    for _ in range(2):  # the second call is not "changed between two calls"
        with pytest.raises(
            lift.LiftError, match=r"step .* mutated the captured variable 'state'"
        ):
            asyncio.run(lifted(2.0))
    streaming = lift.lift(stream)
    for _ in range(2):
        with pytest.raises(
            lift.LiftError, match=r"stream .* mutated the captured variable 'state'"
        ):
            asyncio.run(collect(streaming(2.0)))
    assert state["log"] == [0.5]


def test_a_watched_coroutine_returns_its_value_and_raises_its_own_error() -> None:
    state: dict[str, Any] = {"lr": 0.5, "log": [0.5]}  # held as a copy, only read

    async def step(x: Any) -> Any:
        if x < 0:
            raise ValueError("negative step")
        return x * state["lr"]

    lifted = lift.lift(step)
    assert asyncio.run(lifted(2.0)) == 1.0
    with pytest.raises(ValueError, match=r"^negative step$"):
        asyncio.run(lifted(-1.0))
    assert asyncio.run(lifted(4.0)) == 2.0  # the failed call left nothing claimed
    assert state == {"lr": 0.5, "log": [0.5]}


def _echo() -> tuple[Callable[..., Any], list[str]]:
    state: dict[str, Any] = {"lr": 0.5, "log": [0.5]}  # held as a copy, only read
    events: list[str] = []

    def echo(x: Any) -> Any:
        total = x
        try:
            while True:
                try:
                    got = yield total * state["lr"]
                except KeyError:
                    got = 10.0
                if got is None:
                    return total
                total += got
        finally:
            events.append("finally")

    return echo, events


def _drive(it: Any) -> list[Any]:
    out = [next(it), it.send(1.0), it.throw(KeyError("k"))]
    try:
        it.send(None)
    except StopIteration as stop:
        out.append(("returned", stop.value))
    return out


def test_a_watched_generator_forwards_send_throw_close_and_its_return_value() -> None:
    echo, events = _echo()
    expected = _drive(echo(2.0))
    assert expected == [1.0, 1.5, 6.5, ("returned", 13.0)]
    assert events == ["finally"]

    echo, events = _echo()
    lifted = lift.lift(echo)
    it = lifted(2.0)
    assert it.__qualname__ == echo.__qualname__
    assert _drive(it) == expected
    assert events == ["finally"]
    it = lifted(2.0)
    assert next(it) == 1.0
    it.close()
    assert events == ["finally", "finally"]
    with pytest.raises(ValueError, match="stop"):
        lifted(2.0).throw(ValueError("stop"))  # never started: its body never runs
    # Nothing changed: no later call is refused.
    assert _drive(lifted(2.0)) == expected


def test_a_watched_async_generator_forwards_asend_athrow_aclose() -> None:
    state: dict[str, Any] = {"lr": 0.5, "log": [0.5]}
    events: list[str] = []

    async def echo(x: Any) -> Any:
        total = x
        try:
            while True:
                try:
                    got = yield total * state["lr"]
                except KeyError:
                    got = 10.0
                total += got or 0.0
        finally:
            events.append("finally")

    async def drive(it: Any) -> list[Any]:
        out = [await it.__anext__(), await it.asend(1.0), await it.athrow(KeyError())]
        await it.aclose()
        return out

    expected = asyncio.run(drive(echo(2.0)))
    assert expected == [1.0, 1.5, 6.5]
    lifted = lift.lift(echo)
    for _ in range(2):
        assert asyncio.run(drive(lifted(2.0))) == expected
    assert events == ["finally"] * 3


def test_a_generator_holding_no_copies_is_returned_as_it_is() -> None:
    w = np.float32(2.0)  # a leaf, in no container: nothing is a copy

    def gen(x: Any) -> Any:
        yield x * w

    it = lift.lift(gen)(1.0)
    assert it.gi_code is gen.__code__  # not wrapped


def test_two_generators_of_one_lifted_running_at_once_check_their_own_copies() -> None:
    state: dict[str, Any] = {"lr": 0.5, "log": [0.5]}

    def gen(x: Any, mutate: bool) -> Any:
        if mutate:
            _add(state["log"])
        yield x * state["lr"]
        yield x

    lifted = lift.lift(gen)
    reading = lifted(2.0, False)
    assert next(reading) == 1.0  # uses the copies the calls share
    with pytest.raises(lift.LiftError, match="mutated the captured variable 'state'"):
        list(lifted(4.0, True))  # a build of its own, refused
    assert list(reading) == [2.0]  # not refused: its copies did not change
    assert list(lifted(2.0, False)) == [1.0, 2.0]
    assert state["log"] == [0.5]


class _Tagged:
    """A mutable pytree node: `w` its child, `tag` its static data."""

    def __init__(self, w: Any, tag: str) -> None:
        self.w, self.tag = w, tag


jax.tree_util.register_pytree_node(
    _Tagged, lambda n: ((n.w,), n.tag), lambda tag, children: _Tagged(children[0], tag)
)


def test_a_call_that_leaves_a_rebuilt_node_unflattenable_is_refused() -> None:
    # After `del node.w` lift's copy cannot even be flattened: changed all the same.
    def make(node: _Tagged) -> Callable[[Any], Any]:
        def strip(x: Any) -> Any:
            del node.w
            return x

        return strip

    node = _Tagged(0.5, "tag")
    with pytest.raises(
        lift.LiftError,
        match=r"^test_a_call_that_leaves.*\.strip \(.*test_side_effects\.py:\d+\) "
        r"mutated the captured variable 'node' in place while it ran: a _Tagged, a "
        r"pytree node that lift rebuilds around its leaves",
    ):
        lift.lift(make(node))(1.0)
    assert node.w == 0.5  # your object is untouched
