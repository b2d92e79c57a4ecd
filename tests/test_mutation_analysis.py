"""The mutation analysis on captured objects: every way a closure (or a
partial) mutates a captured container here is refused or reaches the user's
object, and the reads of the same shapes are not refused.

Each case builds a closure (or partial) over a container, or a container
holding at least one float (so lift rebuilds it around its leaves, unless the
case says otherwise). Plain Python changes the user's object; a lifted
function must change the same object, or refuse with a `LiftError` that names
the function, its file and the variable, leaving the object untouched, under
`lift.lift`, `jax.jit`, `lift.jit`, `vmap` and in a `lax.scan` body. The
outcome these tests rule out is the third: the change landing on a copy while
the user's object silently stays as it was. Most are refused when lifted, from the bytecode; the shapes the
reading does not follow are refused by the call that made the change
(`lift._copies`). Each case's read-only twin is in `_READS`, and `_RELIFTED`
checks that a refusal holds once a shape's fast path (the replay) is
compiled.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import re
from collections.abc import Callable
from typing import Any, Self

import jax
import numpy as np
import pytest

import lift

# A maker returns the function to lift, the user's object, and how to read
# that object's state (its repr unless the case says otherwise).
Maker = Callable[[], tuple[Callable[..., Any], Any]]

_RUN: dict[str, Callable[[Callable[..., Any]], Any]] = {
    "eager": lambda f: lift.lift(f)(2.0),
    "jax.jit": lambda f: jax.jit(lambda g, x: g(x))(lift.lift(f), 2.0),
    "lift.jit": lambda f: lift.jit(f)(2.0),
    "vmap": lambda f: jax.vmap(lift.lift(f))(np.full(1, 2.0))[0],
    "lax.scan": lambda f: jax.lax.scan(
        lambda c, _: (lift.lift(f)(c), None), 2.0, length=1
    )[0],
}


def _where(fn: Any) -> tuple[str, str]:
    """The name and file a refusal must give for `fn` (the function whose code
    mutates: a partial's function)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    code = fn.__code__
    return fn.__qualname__, code.co_filename


def _check(make: Maker, consumer: str, variable: str) -> None:
    """The user's object changes as plain Python changes it, or lift refuses,
    naming function, file and variable, with the object untouched."""
    f, c = make()
    f(2.0)
    expected = repr(c)
    f, c = make()
    before = repr(c)
    assert before != expected  # (the case does mutate)
    try:
        _RUN[consumer](f)
    except lift.LiftError as e:
        text = str(e)
        name, filename = _where(f)
        assert name in text and filename in text and repr(variable) in text, text
        assert repr(c) == before  # nothing ran on a copy
        return
    assert repr(c) == expected, "the change reached a copy, not the user's object"


# -- containers JAX rebuilds that are not exactly `list` or `dict` ------------


def _defaultdict_counter() -> tuple[Callable[..., Any], Any]:
    counts: collections.defaultdict[str, int] = collections.defaultdict(int)

    def step(x: Any) -> Any:
        counts["n"] += 1  # plain Python: counts == {'n': 1}
        return x * 2

    return step, counts


def _defaultdict_factory_set() -> tuple[Callable[..., Any], Any]:
    # Holds a float: rebuilt, its `default_factory` from JAX's aux data.
    counts: collections.defaultdict[str, Any] = collections.defaultdict(int, lr=0.5)

    def step(x: Any) -> Any:
        counts.default_factory = list  # plain Python: counts makes lists
        return x * counts["lr"]

    return step, counts


def _ordered_dict_cache() -> tuple[Callable[..., Any], Any]:
    cache: collections.OrderedDict[str, Any] = collections.OrderedDict(w=0.5)

    def step(x: Any) -> Any:
        cache["k"] = 1  # plain Python: cache gains 'k'
        return x * cache["w"]

    return step, cache


def _nested_defaultdict_counter() -> tuple[Callable[..., Any], Any]:
    # Reading the path to the container mutated must not add keys to it
    # either: `counts['n']` on a defaultdict inserts `'n'`.
    state = {"w": 0.5, "counts": collections.defaultdict(int)}

    def step(x: Any) -> Any:
        state["counts"]["n"] += 1  # plain Python: state['counts'] == {'n': 1}
        return x * state["w"]

    return step, state


# -- attribute stores on a registered pytree node ------------------------------


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["w"], meta_fields=["calls"]
)
@dataclasses.dataclass
class _Model:
    w: Any
    calls: int = 0


def _pytree_attribute_augmented() -> tuple[Callable[..., Any], Any]:
    m = _Model(np.float32(1.0))

    def step(x: Any) -> Any:
        m.calls += 1  # plain Python: m.calls == 1
        return x * m.w

    return step, m


def _pytree_setattr() -> tuple[Callable[..., Any], Any]:
    m = _Model(np.float32(1.0))

    def step(x: Any) -> Any:
        setattr(m, "calls", 5)  # noqa: B010 (plain Python: m.calls == 5)
        return x * m.w

    return step, m


# -- mutating methods reached by other spellings -------------------------------


def _getattr_method() -> tuple[Callable[..., Any], Any]:
    buf = [0.5]

    def step(x: Any) -> Any:
        getattr(buf, "append")(1)  # noqa: B009 (plain Python: buf == [0.5, 1])
        return x * 2

    return step, buf


def _type_of_unbound() -> tuple[Callable[..., Any], Any]:
    buf = [0.5]

    def step(x: Any) -> Any:
        type(buf).append(buf, 1)  # plain Python: buf == [0.5, 1]
        return x * 2

    return step, buf


def _class_attribute_unbound() -> tuple[Callable[..., Any], Any]:
    buf = [0.5]

    def step(x: Any) -> Any:
        buf.__class__.append(buf, 1)  # plain Python: buf == [0.5, 1]
        return x * 2

    return step, buf


def _dunder_imul() -> tuple[Callable[..., Any], Any]:
    buf = [0.5]

    def step(x: Any) -> Any:
        buf.__imul__(2)  # plain Python: buf == [0.5, 0.5]
        return x * 2

    return step, buf


def _unbound_imul() -> tuple[Callable[..., Any], Any]:
    buf = [0.5]

    def step(x: Any) -> Any:
        list.__imul__(buf, 2)  # plain Python: buf == [0.5, 0.5]
        return x * 2

    return step, buf


# -- values the flow loses on the way -------------------------------------------


def _match_mapping() -> tuple[Callable[..., Any], Any]:
    state = {"log": [0.5], "lr": 0.5}

    def step(x: Any) -> Any:
        match state:
            case {"log": log}:
                log.append(1)  # plain Python: state['log'] == [0.5, 1]
        return x * 2

    return step, state


def _inner_closure_over_alias() -> tuple[Callable[..., Any], Any]:
    state = {"log": [0.5]}

    def step(x: Any) -> Any:
        log = state["log"]

        def add() -> None:
            log.append(1)  # plain Python: state['log'] == [0.5, 1]

        add()
        return x * 2

    return step, state


def _comprehension_over_a_display() -> tuple[Callable[..., Any], Any]:
    state = {"log": [0.5]}

    def step(x: Any) -> Any:
        [log.append(1) for log in [state["log"]]]  # state['log'] == [0.5, 1]
        return x * 2

    return step, state


def _starred_list_display() -> tuple[Callable[..., Any], Any]:
    rows = [[0.5]]

    def step(x: Any) -> Any:
        [*rows][0].append(1)  # noqa: RUF015 (a new outer list, the user's rows: [[0.5, 1]])
        return x * 2

    return step, rows


def _dict_display_copy() -> tuple[Callable[..., Any], Any]:
    d = {"a": [0.5]}

    def step(x: Any) -> Any:
        {**d}["a"].append(1)  # a new outer dict, the user's list: [0.5, 1]
        return x * 2

    return step, d


def _nested_display() -> tuple[Callable[..., Any], Any]:
    state = {"log": [0.5]}

    def step(x: Any) -> Any:
        [[state["log"]]][0][0].append(1)  # plain Python: state['log'] == [0.5, 1]
        return x * 2

    return step, state


def _enumerate_over_a_display() -> tuple[Callable[..., Any], Any]:
    state = {"log": [0.5]}

    def step(x: Any) -> Any:
        for _, log in enumerate([state["log"]]):
            log.append(1)  # plain Python: state['log'] == [0.5, 1]
        return x * 2

    return step, state


def _function_attribute_through_a_list() -> tuple[Callable[..., Any], Any]:
    def helper(x: Any) -> Any:
        return x

    helper.log = [0.5]  # type: ignore[attr-defined]
    fns = [helper]

    def step(x: Any) -> Any:
        fns[0].log.append(1)  # type: ignore[attr-defined] (helper.log == [0.5, 1])
        return x * 2

    return step, helper.log  # type: ignore[attr-defined]


def _other_functions_attribute() -> tuple[Callable[..., Any], Any]:
    def helper(x: Any) -> Any:
        return x

    helper.log = [0.5]  # type: ignore[attr-defined]

    def step(x: Any) -> Any:
        helper.log.append(1)  # type: ignore[attr-defined] (helper.log == [0.5, 1])
        return helper(x) * 2

    return step, helper.log  # type: ignore[attr-defined]


def _captured_builtin_partial() -> tuple[Callable[..., Any], Any]:
    buf = [0.5]
    push = functools.partial(list.append, buf)

    def step(x: Any) -> Any:
        push(1)  # plain Python: buf == [0.5, 1]
        return x * 2

    return step, buf


def _varargs(*args: Any) -> Any:
    args[0].append(1)  # plain Python: the partial's list gains 1
    return args[-1] * 2


def _partial_varargs() -> tuple[Callable[..., Any], Any]:
    buf = [0.5]
    return functools.partial(_varargs, buf), buf


def _varkw(x: Any, **kw: Any) -> Any:
    kw["log"].append(1)  # plain Python: the partial's list gains 1
    return x * 2


def _partial_varkw() -> tuple[Callable[..., Any], Any]:
    buf = [0.5]
    return functools.partial(_varkw, log=buf), buf


# -- a captured NumPy array written in place ------------------------------------


def _numpy_item_store() -> tuple[Callable[..., Any], Any]:
    buf = np.zeros(3)

    def step(x: Any) -> Any:
        buf[0] = 1.0  # plain Python (and plain jax.jit, at trace time): buf[0] == 1
        return x * 2

    return step, buf


# -- shapes the reading does not follow: the call shows them ------------------


def _method_of_a_display() -> tuple[Callable[..., Any], Any]:
    state = {"log": [0.5]}

    def step(x: Any) -> Any:
        {"a": state["log"]}.get("a").append(1)  # plain Python: state['log'] gains 1
        return x * 2

    return step, state


def _result_of_a_call() -> tuple[Callable[..., Any], Any]:
    rows = [[0.5], [0.5, 1.5]]

    def step(x: Any) -> Any:
        max(rows, key=len).append(1)  # plain Python: rows[1] gains 1
        return x * 2

    return step, rows


def _add(r: list[Any]) -> None:
    r.append(1)


def _passed_to_a_users_function() -> tuple[Callable[..., Any], Any]:
    state = {"log": [0.5]}

    def step(x: Any) -> Any:
        _add(state["log"])  # plain Python: state['log'] gains 1
        return x * 2

    return step, state


def _passed_to_an_inner_function() -> tuple[Callable[..., Any], Any]:
    state = {"log": [0.5]}

    def step(x: Any) -> Any:
        def add(r: list[Any]) -> None:
            r.append(1)

        add(state["log"])  # plain Python: state['log'] gains 1
        return x * 2

    return step, state


def _yielded_by_a_generator() -> tuple[Callable[..., Any], Any]:
    rows = [[0.5]]

    def step(x: Any) -> Any:
        list(r for r in rows)[0].append(1)  # noqa: RUF015  plain Python: rows[0] gains 1
        return x * 2

    return step, rows


def _dict_call() -> tuple[Callable[..., Any], Any]:
    state = {"log": [0.5]}

    def step(x: Any) -> Any:
        dict(log=state["log"])["log"].append(1)  # plain Python: state['log'] gains 1
        return x * 2

    return step, state


def _operator_getitem() -> tuple[Callable[..., Any], Any]:
    import operator

    state = {"log": [0.5]}

    def step(x: Any) -> Any:
        operator.getitem(state, "log").append(1)  # plain Python: state['log'] gains 1
        return x * 2

    return step, state


def _through_an_exception() -> tuple[Callable[..., Any], Any]:
    state = {"log": [0.5]}

    def step(x: Any) -> Any:
        try:
            raise ValueError(state["log"])
        except ValueError as e:
            e.args[0].append(1)  # plain Python: state['log'] gains 1
        return x * 2

    return step, state


def _registered_node_by_a_users_function() -> tuple[Callable[..., Any], Any]:
    m = _Counted(np.float32(1.0), [0.5])

    def step(x: Any) -> Any:
        _add(m.log)  # plain Python: m.log gains 1
        return x * m.w

    return step, m


def _node_attribute_by_a_users_function() -> tuple[Callable[..., Any], Any]:
    m = _Registered(np.float32(1.0))

    def step(x: Any) -> Any:
        _rename(m)  # plain Python: m gains an attribute
        return x * m.w

    return step, m


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

    def log(self, x: Any) -> Any:
        self.state["log"].append(1)  # plain Python: m.state['log'] gains 1
        return x * self.w

    def see(self, x: Any) -> Any:
        self.state["seen"][0].add(1)  # plain Python: the set gains 1
        return x * self.w

    def read(self, x: Any) -> Any:
        return x * self.w * (len(self.history) + len(self.state["log"]) + 1)

    def __repr__(self) -> str:
        return f"_Remembering({self.history}, {self.state})"


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


def _slot_set_by_a_users_function() -> tuple[Callable[..., Any], Any]:
    m = _Slotted(np.float32(1.0))

    def step(x: Any) -> Any:
        _bump(m)  # plain Python: m.calls == 1
        return x * m.w

    return step, m


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


def _default_history() -> tuple[Callable[..., Any], Any]:
    _DEFAULT_HISTORY.clear()
    m = _DefaultHistory(np.float32(1.0))
    return m.remember, m


# The case, its maker, and the variable a refusal must name.
_CASES: dict[str, tuple[Maker, str]] = {
    "defaultdict counter: counts[k] += 1": (_defaultdict_counter, "counts"),
    "OrderedDict cache: cache[k] = v": (_ordered_dict_cache, "cache"),
    "defaultdict in a dict: state[k]['n'] += 1": (
        _nested_defaultdict_counter,
        "state",
    ),
    "registered dataclass: m.calls += 1": (_pytree_attribute_augmented, "m"),
    "registered dataclass: setattr(m, 'calls', 5)": (_pytree_setattr, "m"),
    "getattr(buf, 'append')(1)": (_getattr_method, "buf"),
    "type(buf).append(buf, 1)": (_type_of_unbound, "buf"),
    "buf.__class__.append(buf, 1)": (_class_attribute_unbound, "buf"),
    "buf.__imul__(2)": (_dunder_imul, "buf"),
    "list.__imul__(buf, 2)": (_unbound_imul, "buf"),
    "match state: case {'log': log}: log.append(1)": (_match_mapping, "state"),
    "log = state[k]; def add(): log.append(1)": (_inner_closure_over_alias, "state"),
    "[log.append(1) for log in [state[k]]]": (_comprehension_over_a_display, "state"),
    "[*rows][0].append(1)": (_starred_list_display, "rows"),
    "{**d}[k].append(1)": (_dict_display_copy, "d"),
    "[[state[k]]][0][0].append(1)": (_nested_display, "state"),
    "for _, log in enumerate([state[k]]): log.append(1)": (
        _enumerate_over_a_display,
        "state",
    ),
    "fns[0].log.append(1), fns = [helper]": (
        _function_attribute_through_a_list,
        "fns",
    ),
    "helper.log.append(1), helper another captured function": (
        _other_functions_attribute,
        "helper",
    ),
    "push = partial(list.append, buf); push(1)": (_captured_builtin_partial, "push"),
    "partial(g, buf), def g(*args): args[0].append(1)": (_partial_varargs, "args"),
    "partial(g, log=buf), def g(x, **kw): kw['log'].append(1)": (
        _partial_varkw,
        "kw",
    ),
    "buf[0] = 1.0 on a captured numpy array": (_numpy_item_store, "buf"),
    "{'a': state[k]}.get('a').append(1)": (_method_of_a_display, "state"),
    "max(rows, key=len).append(1)": (_result_of_a_call, "rows"),
    "add(state[k]), a function of the module": (_passed_to_a_users_function, "state"),
    "add(state[k]), def add(r) inside": (_passed_to_an_inner_function, "state"),
    "list(r for r in rows)[0].append(1)": (_yielded_by_a_generator, "rows"),
    "dict(log=state[k])['log'].append(1)": (_dict_call, "state"),
    "operator.getitem(state, k).append(1)": (_operator_getitem, "state"),
    "raise E(state[k]) ... e.args[0].append(1)": (_through_an_exception, "state"),
    "add(m.log), m a registered dataclass": (
        _registered_node_by_a_users_function,
        "m",
    ),
    "set_w2(m), m a registered class": (_node_attribute_by_a_users_function, "m"),
    "bump(m), m a registered class with __slots__": (
        _slot_set_by_a_users_function,
        "m",
    ),
    "lift(m.remember), self.history.append(1), history a slot made in __init__": (
        lambda: ((m := _Slotted(np.float32(1.0))).remember, m),
        "self",
    ),
    "counts.default_factory = list, counts a rebuilt defaultdict": (
        _defaultdict_factory_set,
        "counts",
    ),
    "lift(m.remember), self.history.append(1), history made in __init__": (
        lambda: ((m := _Remembering(np.float32(1.0))).remember, m),
        "self",
    ),
    "lift(m.log), self.state['log'].append(1), state made in __init__": (
        lambda: ((m := _Remembering(np.float32(1.0))).log, m),
        "self",
    ),
    "lift(m.see), self.state['seen'][0].add(1), a set in a tuple": (
        lambda: ((m := _Remembering(np.float32(1.0))).see, m),
        "self",
    ),
}


def _case_params() -> list[Any]:
    return [
        pytest.param(case, consumer, id=f"{case}-{consumer}")
        for case in _CASES
        for consumer in _RUN
    ]


@pytest.mark.parametrize(("case", "consumer"), _case_params())
def test_the_users_object_sees_the_change_or_lift_refuses(
    case: str, consumer: str
) -> None:
    make, variable = _CASES[case]
    _check(make, consumer, variable)


# A container a rebuilt node shares with your object: the change reaches it.
_SHARED: dict[str, Maker] = {
    "self.history shared through the aux data": lambda: (
        (m := _SharingHistory(np.float32(1.0))).remember,
        m,
    ),
    "self.history a default of __init__": _default_history,
}


@pytest.mark.parametrize("consumer", list(_RUN))
@pytest.mark.parametrize("case", list(_SHARED))
def test_a_container_a_rebuilt_node_shares_is_changed_not_refused(
    case: str, consumer: str
) -> None:
    f, c = _SHARED[case]()
    f(2.0)
    expected = repr(c)
    f, c = _SHARED[case]()
    assert repr(c) != expected
    _RUN[consumer](f)
    assert repr(c) == expected


def test_a_partial_of_a_builtin_mutator_acts_on_the_users_list() -> None:
    # plain Python: `functools.partial(list.append, buf)(1)` appends to buf.
    buf = [0.5]
    try:
        lift.lift(functools.partial(list.append, buf))(1)
    except lift.LiftError as e:  # refused, or acts on buf: both fine
        assert re.search(r"\bbuf\b|list\.append", str(e)), str(e)  # noqa: PT017
        assert buf == [0.5]
        return
    assert buf == [0.5, 1], "the change reached a copy, not the user's list"


def _counter_of(c: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        c["n"] += 1
        return x * 2

    return step


def _helper_logging_to(c: Any) -> Callable[[Any], Any]:
    def helper(x: Any) -> Any:
        return x

    helper.log = c  # type: ignore[attr-defined]

    def step(x: Any) -> Any:
        helper.log.append(1)  # type: ignore[attr-defined]
        return helper(x) * 2

    return step


def _pushing_to(c: Any) -> Callable[[Any], Any]:
    push = functools.partial(list.append, c)

    def step(x: Any) -> Any:
        push(1)
        return x * 2

    return step


def _appending_through_a_display(c: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        [*c][0].append(1)  # noqa: RUF015
        return x * 2

    return step


def _appending_through_a_closed_over_local(c: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        log = c["log"]

        def add() -> None:
            log.append(1)

        add()
        return x * 2

    return step


class _Plain:
    """An object that is no pytree: lift keeps it as the user's."""

    def __init__(self) -> None:
        self.w = np.float32(1.0)
        self.calls = 0

    def __repr__(self) -> str:
        return f"_Plain(calls={self.calls})"


def _counting_calls_of(m: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        m.calls += 1
        return x * m.w

    return step


# Lifted past the count after which a shape's fast path is compiled (with the
# checks on and off), then with the container a refusal is due for.
_RELIFTED: dict[
    str,
    tuple[Callable[[Any], Callable[..., Any]], Callable[[], Any], Callable[[], Any]],
] = {
    "defaultdict after dicts": (
        _counter_of,
        lambda: {"n": 0},
        lambda: collections.defaultdict(int),
    ),
    "OrderedDict after dicts": (
        _counter_of,
        lambda: {"n": 0, "w": 0.5},
        lambda: collections.OrderedDict(n=0, w=0.5),
    ),
    "partial(g, *args) after static lists": (
        lambda c: functools.partial(_varargs, c),
        lambda: [],
        lambda: [0.5],
    ),
    "helper.log.append(v) after static lists": (
        _helper_logging_to,
        lambda: [],
        lambda: [0.5],
    ),
    "push = partial(list.append, c) captured, after static lists": (
        _pushing_to,
        lambda: [],
        lambda: [0.5],
    ),
    "[*rows][0].append(v) after static rows": (
        _appending_through_a_display,
        lambda: [[]],
        lambda: [[0.5]],
    ),
    "log = c[k]; def add(): log.append(v) after static logs": (
        _appending_through_a_closed_over_local,
        lambda: {"log": []},
        lambda: {"log": [0.5]},
    ),
    "m.calls += 1 on a registered dataclass after plain objects": (
        _counting_calls_of,
        _Plain,
        lambda: _Model(np.float32(1.0)),
    ),
    "partial(g, **kw) after static lists": (
        lambda c: functools.partial(_varkw, log=c),
        lambda: [],
        lambda: [0.5],
    ),
}


@pytest.mark.parametrize("case", list(_RELIFTED))
def test_a_refusal_holds_when_the_shape_was_lifted_often(case: str) -> None:
    from lift import _replay

    make, fine, refused = _RELIFTED[case]
    for verify in (False, True):
        with lift.verifying(verify):
            for _ in range(_replay.REPLAY_AFTER + 2):
                c = fine()
                if isinstance(c, dict) and "w" in c:
                    with pytest.raises(lift.LiftError):
                        lift.lift(make(c))
                else:
                    lift.lift(make(c))(2.0)
            for _ in range(_replay.REPLAY_AFTER + 2):
                c = refused()
                before = repr(c)
                with pytest.raises(
                    lift.LiftError,
                    match=r"mutates (the captured|its first argument)|sets an attr",
                ):
                    lift.lift(make(c))(2.0)
                assert repr(c) == before


def test_a_container_made_anew_is_refused_when_the_shape_was_lifted_often() -> None:
    from lift import _replay

    for verify in (False, True):
        with lift.verifying(verify):
            for _ in range(_replay.REPLAY_AFTER + 2):
                m = _Remembering(np.float32(1.0))
                with pytest.raises(lift.LiftError, match="attribute `history`"):
                    lift.lift(m.remember)(2.0)
                assert m.history == []


# -- the clean twins of the cases above: reads, never refused --------------------


def _match_read() -> tuple[Callable[..., Any], Any]:
    state = {"log": [0.5], "lr": 0.5}

    def step(x: Any) -> Any:
        match state:
            case {"log": log, **rest}:
                return x * log[0] * rest["lr"]
        return x

    return step, state


def _type_read() -> tuple[Callable[..., Any], Any]:
    buf = [0.5, 1.5]

    def step(x: Any) -> Any:
        n = type(buf).__len__(buf) * buf.__class__.__getitem__(buf, 1)
        return x * n * len(type(buf).__name__)

    return step, buf


def _getattr_read() -> tuple[Callable[..., Any], Any]:
    buf = [0.5, 1.5]

    def step(x: Any) -> Any:
        item = getattr(buf, "__getitem__")  # noqa: B009
        return x * item(0) * getattr(buf, "__len__")()  # noqa: B009

    return step, buf


def _pytree_attribute_read() -> tuple[Callable[..., Any], Any]:
    m = _Model(np.float32(1.0), calls=2)

    def step(x: Any) -> Any:
        return x * m.w * (m.calls + 1) * getattr(m, "calls")  # noqa: B009

    return step, m


def _inner_closure_read() -> tuple[Callable[..., Any], Any]:
    state = {"log": [0.5]}

    def step(x: Any) -> Any:
        log = state["log"]

        def first() -> Any:
            return log[0]

        return x * first()

    return step, state


def _comprehension_over_a_display_read() -> tuple[Callable[..., Any], Any]:
    state = {"log": [0.5]}

    def step(x: Any) -> Any:
        return x * sum([log[0] for log in [state["log"]]])

    return step, state


def _starred_list_display_read() -> tuple[Callable[..., Any], Any]:
    rows = [[0.5]]

    def step(x: Any) -> Any:
        copy = [*rows]
        copy.append([1.5])  # the new outer list's, not the user's rows
        return x * [*rows][0][0] * len(copy)  # noqa: RUF015

    return step, rows


def _dict_display_read() -> tuple[Callable[..., Any], Any]:
    d = {"a": [0.5]}

    def step(x: Any) -> Any:
        copy = {**d, "b": 1.5}
        copy["c"] = 2.0  # the new dict's
        return x * {**d}["a"][0] * copy["b"]

    return step, d


def _other_functions_attribute_read() -> tuple[Callable[..., Any], Any]:
    def helper(x: Any) -> Any:
        return x

    helper.log = [0.5]  # type: ignore[attr-defined]

    def step(x: Any) -> Any:
        return helper(x) * helper.log[0]  # type: ignore[attr-defined]

    return step, helper.log  # type: ignore[attr-defined]


def _captured_builtin_partial_read() -> tuple[Callable[..., Any], Any]:
    buf = [0.5, 1.5]
    size = functools.partial(len, buf)

    def step(x: Any) -> Any:
        return x * size()

    return step, buf


def _varargs_reader(*args: Any) -> Any:
    return args[0][0] * args[-1]


def _varkw_reader(x: Any, **kw: Any) -> Any:
    return kw["log"][0] * x


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


def _cached_property_read() -> tuple[Callable[..., Any], Any]:
    c = _Cached(np.float32(1.0))

    def step(x: Any) -> Any:
        return x * c.double

    return step, c


_READS: dict[str, Maker] = {
    "c.double, a functools.cached_property of a registered node": (
        _cached_property_read
    ),
    "match state: case {'log': log, **rest}: read": _match_read,
    "type(buf).__len__(buf), buf.__class__.__getitem__(buf, 1)": _type_read,
    "getattr(buf, '__getitem__')(0)": _getattr_read,
    "registered dataclass: m.calls + 1, getattr(m, 'calls')": (_pytree_attribute_read),
    "log = state[k]; def first(): return log[0]": _inner_closure_read,
    "[log[0] for log in [state[k]]]": _comprehension_over_a_display_read,
    "[*rows][0][0], [*rows].append(v)": _starred_list_display_read,
    "{**d}[k][0], {**d}[k] = v": _dict_display_read,
    "helper.log[0], helper another captured function": (
        _other_functions_attribute_read
    ),
    "size = partial(len, buf); size()": _captured_builtin_partial_read,
    "partial(g, buf), def g(*args): args[0][0]": lambda: (
        functools.partial(_varargs_reader, [0.5]),
        None,
    ),
    "partial(g, log=buf), def g(x, **kw): kw['log'][0]": lambda: (
        functools.partial(_varkw_reader, log=[0.5]),
        None,
    ),
    "lift(m.read), len(self.history), history made in __init__": lambda: (
        (m := _Remembering(np.float32(1.0))).read,
        m,
    ),
}


@pytest.mark.parametrize("consumer", list(_RUN))
@pytest.mark.parametrize("case", list(_READS))
def test_a_read_of_the_same_shape_is_not_refused(case: str, consumer: str) -> None:
    f, _ = _READS[case]()
    expected = f(2.0)
    f, c = _READS[case]()
    before = repr(c)
    assert np.allclose(_RUN[consumer](f), expected)
    assert repr(c) == before


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
