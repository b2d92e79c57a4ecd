"""A lifted function acts on the objects its original captured (the contract's
rule for lists, dicts and sets): every holder with every consumer.

Each holder reaches a container by another way (captured directly, inside a
tuple or a dict, as a bound method's `self` attribute, as a partial's argument
or keyword, as a default, through a nested closure, as a function attribute),
with a static or a dynamic value beside it. Each consumer runs the lifted
function another way (eagerly, through `jax.jit`, `lift.jit`, `jax.vmap`).
The code appends to the container, fills it or counts in it: the change must reach the user's object.
A container that itself holds a dynamic leaf is rebuilt around it, so a call
mutating it is refused when it returns, naming the function, the variable and
the fix, the user's object untouched: never a silent copy. Matrices cover
every pair of their axes, not their product.
"""

from __future__ import annotations

import bisect as b
import dataclasses
import functools
import heapq
import heapq as hq
import operator as ops
import random
import re
import textwrap
from bisect import insort
from collections.abc import Callable
from heapq import heappush as push
from operator import getitem as at
from typing import Any, Final

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import in_turn, pairwise

import lift

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
    "rows": ("for row in {c}: row.append(1)", lambda: [[], []], [[1], [1]]),
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


@pytest.mark.parametrize(
    ("holder", "mutation", "consumer", "beside"),
    pairwise(list(_HOLDERS), list(_MUTATIONS), list(_CONSUMERS), list(_BESIDE)),
)
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
            match=r"mutated the captured variable 'self' in place while it ran: "
            r"a (list|dict) that sits in a pytree node",
        ):
            _CONSUMERS[consumer](make, c, lr)
        assert c == start()
        return
    out = _CONSUMERS[consumer](make, c, lr)
    assert c == after  # the user's own object, changed once (one trace)
    assert float(out) == 2.0 * lr


# Containers that hold a dynamic leaf themselves: rebuilt, so a call mutating
# them is refused when it returns.
_DYNAMIC_CONTAINERS: dict[str, Callable[[], Any]] = {
    "append": lambda: [0.5],
    "fill": lambda: {"w": jnp.ones(2)},
    "count": lambda: {"w": np.float32(1.0)},
    "rows": lambda: [[], [0.5]],
}


# (A plain object's container is the user's own: see the next test.)
_REBUILT_HOLDERS: Final = [h for h in _HOLDERS if h != "self"]


@pytest.mark.parametrize(
    ("holder", "mutation", "consumer"),
    [
        (holder, mutation, list(_CONSUMERS)[(h + m) % len(_CONSUMERS)])
        for h, holder in enumerate(_REBUILT_HOLDERS)
        for m, mutation in enumerate(_DYNAMIC_CONTAINERS)
    ],
)
def test_a_call_mutating_a_container_holding_a_dynamic_leaf_is_refused(
    holder: str, mutation: str, consumer: str
) -> None:
    make = _maker(holder, mutation)
    c = _DYNAMIC_CONTAINERS[mutation]()
    before = repr(c)
    name = _HOLDERS[holder][0]
    # The refusal names the capture holding the copy: a partial's argument by
    # its position, a function's attribute by its name.
    name = {"partial argument": "args[0]", "function attribute": "log"}.get(
        holder, name
    )
    with pytest.raises(
        lift.LiftError,
        match=rf"(variable '{name}'|capture `{re.escape(name)}`).* in place while it "
        r"ran(?s:.*)Fix: pass",
    ):
        _CONSUMERS[consumer](make, c, 3.0)
    if mutation == "rows":
        # The row without a leaf is your own, and the call appended to it
        # before the row lift copied was found changed: the copy is untouched.
        assert c[1] == [0.5]
    else:
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
    if mutation == "append":
        assert len(c) == 2
    elif mutation == "rows":
        assert c == [[1], [0.5, 1]]
    else:
        assert set(c) > {"w"}


@pytest.mark.parametrize(
    ("holder", "mutation"),
    [
        (holder, list(_DYNAMIC_CONTAINERS)[h % len(_DYNAMIC_CONTAINERS)])
        for h, holder in enumerate(_REBUILT_HOLDERS)
    ],
)
def test_the_same_code_over_a_dynamic_container_is_refused_after_a_static_one(
    holder: str, mutation: str
) -> None:
    # The same code lifted with a container of static values (the user's own),
    # then with one holding a dynamic leaf.
    make = _maker(holder, mutation)
    _, start, _ = _MUTATIONS[mutation]
    if not _refused(holder, mutation):
        lift.lift(make(start(), 3.0))(2.0)
    with pytest.raises(lift.LiftError, match="in place while it ran"):
        lift.lift(make(_DYNAMIC_CONTAINERS[mutation](), 3.0))(2.0)


# -- each way code mutates a container, and reads ------------------------------
#
# Each maker builds `step` over a container holding a float (rebuilt around it,
# so mutating it must be refused) and returns it with the container; in
# `state[k].append(x)` the list mutated holds none (the user's own, which the
# change must reach).


def _augmented_item() -> tuple[Callable[[Any], Any], Any]:
    metrics = {"loss": 0.0}

    def step(x: Any) -> Any:
        metrics["loss"] += x
        return x

    return step, metrics


def _nested_append() -> tuple[Callable[[Any], Any], Any]:
    state: dict[str, Any] = {"lr": 0.5, "log": []}

    def step(x: Any) -> Any:
        state["log"].append(x)
        return x * state["lr"]

    return step, state


def _computed_index() -> tuple[Callable[[Any], Any], Any]:
    buf = [0.0, 0.0]

    def step(x: Any) -> Any:
        i = 0
        buf[i + 1] = x
        return x

    return step, buf


def _slice_store() -> tuple[Callable[[Any], Any], Any]:
    buf = [0.0, 0.0]

    def step(x: Any) -> Any:
        buf[:] = [x, x]
        return x

    return step, buf


def _bounded_slice_store() -> tuple[Callable[[Any], Any], Any]:
    buf = [0.0, 0.0]

    def step(x: Any, a: int = 0, b: int = 1) -> Any:
        buf[a:b] = [x]
        return x

    return step, buf


def _slice_delete() -> tuple[Callable[[Any], Any], Any]:
    buf = [0.0, 0.0]

    def step(x: Any) -> Any:
        del buf[1:]
        return x

    return step, buf


def _heappush() -> tuple[Callable[[Any], Any], Any]:
    heap = [0.5]

    def step(x: Any) -> Any:
        heapq.heappush(heap, x)
        return x

    return step, heap


def _imported_insort() -> tuple[Callable[[Any], Any], Any]:
    buf = [0.5]

    def step(x: Any) -> Any:
        insort(buf, 1.0)
        return x

    return step, buf


def _through_a_local() -> tuple[Callable[[Any], Any], Any]:
    state: dict[str, Any] = {"lr": 0.5, "log": [0.5]}

    def step(x: Any) -> Any:
        log = state["log"]
        log += [x]
        return x

    return step, state


_MUTATING: dict[str, Callable[[], tuple[Callable[[Any], Any], Any]]] = {
    "metrics[k] += x": _augmented_item,
    "state[k].append(x)": _nested_append,  # (reaches the user's list)
    "buf[i + 1] = x": _computed_index,
    "buf[:] = ...": _slice_store,
    "buf[a:b] = ...": _bounded_slice_store,
    "del buf[1:]": _slice_delete,
    "heapq.heappush(buf, x)": _heappush,
    "insort(buf, x)": _imported_insort,
    "log = state[k]; log += [x]": _through_a_local,
}


@pytest.mark.parametrize("case", list(_MUTATING))
def test_a_mutated_container_reaches_the_user_or_is_refused(case: str) -> None:
    # Refused with the user's container untouched, or (a container holding no
    # dynamic leaf) changed as the plain function changes it.
    plain, expected = _MUTATING[case]()
    plain(2.0)
    step, container = _MUTATING[case]()
    before = repr(container)
    if case == "state[k].append(x)":
        lift.lift(step)(2.0)
        assert container == expected
        return
    with pytest.raises(
        lift.LiftError,
        match=r"mutated the captured variable '\w+' in place(?s:.*)"
        r"mutates-a-rebuilt-container",
    ):
        lift.lift(step)(2.0)
    assert repr(container) == before


def _read_index() -> tuple[Callable[[Any], Any], Any]:
    buf = [0.5, 1.5]

    def step(x: Any) -> Any:
        i = 0
        return x * buf[i + 1]

    return step, buf


def _slice_copy() -> tuple[Callable[[Any], Any], Any]:
    buf = [0.5, 1.5]

    def step(x: Any) -> Any:
        copy = buf[:]
        copy.append(x)  # the copy's, not the capture's
        return sum(copy)

    return step, buf


def _reductions() -> tuple[Callable[[Any], Any], Any]:
    buf = [0.5, 1.5]

    def step(x: Any) -> Any:
        return x * sum(buf) + jnp.asarray(buf).sum()

    return step, buf


def _read_item() -> tuple[Callable[[Any], Any], Any]:
    metrics = {"loss": 0.5}

    def step(x: Any) -> Any:
        return (metrics["loss"] + x) * len(metrics)

    return step, metrics


def _as_a_key() -> tuple[Callable[[Any], Any], Any]:
    buf = ["k", 1.5]

    def step(x: Any) -> Any:
        other: dict[Any, Any] = {}
        other[buf[0]] = x  # `other` is mutated, not `buf`
        return other["k"] * buf[1]

    return step, buf


def _own_heappush() -> tuple[Callable[[Any], Any], Any]:
    heap = [0.5]

    def step(x: Any) -> Any:
        return heappush(heap, x)  # this module's, which only reads

    return step, heap


_READING: dict[str, Callable[[], tuple[Callable[[Any], Any], Any]]] = {
    "buf[i + 1]": _read_index,
    "copy = buf[:]; copy.append(x)": _slice_copy,
    "sum(buf), jnp.asarray(buf)": _reductions,
    "metrics[k] + x, len(metrics)": _read_item,
    "other[buf[0]] = x": _as_a_key,
    "heappush(buf, x) of one's own": _own_heappush,
}


def heappush(heap: list[Any], x: Any) -> Any:
    """Named like `heapq.heappush`, and mutates nothing."""
    return heap[0] * x


@pytest.mark.parametrize("case", list(_READING))
def test_reading_a_container_holding_a_float_is_not_a_mutation(case: str) -> None:
    plain, _ = _READING[case]()
    expected = plain(2.0)
    step, container = _READING[case]()
    before = repr(container)
    assert np.allclose(lift.lift(step)(2.0), expected)
    assert repr(container) == before


# -- mutations found by the object a name is bound to, and their clean twins ---
#
# Each maker takes the container and returns `step`, which mutates it (`_SEEN`)
# or reads it the same way (`_CLEAN`). A container of static values is the
# user's own, which the change reaches under every consumer; one holding a
# float is rebuilt, so the mutation is refused, naming the function, its
# file:line and the variable, with the container untouched.

app = list.append  # a global alias of an unbound method


def _aliased_push(buf: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        push(buf, 1)  # `from heapq import heappush as push`
        return x * 2.0

    return step


def _module_alias(buf: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        hq.heappush(buf, 1)  # `import heapq as hq`
        return x * 2.0

    return step


def _bisect_alias(buf: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        b.insort(buf, 1)  # `import bisect as b`
        return x * 2.0

    return step


def _imported_inside(buf: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        from heapq import heappush as put

        put(buf, 1)
        return x * 2.0

    return step


def _module_imported_inside(buf: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        import bisect as bs

        bs.insort(buf, 1)
        return x * 2.0

    return step


def _unbound_append(buf: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        list.append(buf, 1)
        return x * 2.0

    return step


def _unbound_extend(buf: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        list.extend(buf, [1, 2])
        return x * 2.0

    return step


def _unbound_update(d: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        dict.update(d, {"k": 1})
        return x * 2.0

    return step


def _unbound_add(s: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        set.add(s, 1)
        return x * 2.0

    return step


def _local_method_alias(buf: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        add = list.append
        add(buf, 1)
        return x * 2.0

    return step


def _global_method_alias(buf: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        app(buf, 1)
        return x * 2.0

    return step


def _iterated_rows(rows: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        for row in rows:
            row.append(1)
        return x * 2.0

    return step


def _iterated_items(d: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        for _, row in d.items():
            row.append(1)
        return x * 2.0

    return step


def _iterated_values(d: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        for row in d.values():
            row.append(1)
        return x * 2.0

    return step


def _enumerated(rows: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        for i, row in enumerate(rows):
            row.append(i)
        return x * 2.0

    return step


def _zipped(rows: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        for row, k in zip(rows, range(9), strict=False):
            row.append(k)
        return x * 2.0

    return step


def _got(state: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        state.get("log").append(1)
        return x * 2.0

    return step


def _got_by_computed_key(state: Any) -> Callable[[Any], Any]:
    def step(x: Any, key: str = "log") -> Any:
        state.get(key).append(1)
        return x * 2.0

    return step


def _set_default(d: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        d.setdefault("log", []).append(1)
        return x * 2.0

    return step


def _next_of_iter(rows: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        next(iter(rows)).append(1)
        return x * 2.0

    return step


def _item_of_a_copy(rows: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        copy = list(rows)
        copy[0].append(1)  # the copy's item is the user's
        rows[:][0].append(1)
        return x * 2.0

    return step


def _popped(rows: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        rows.pop().append(1)  # the list popped stays the user's
        return x * 2.0

    return step


def _comprehended(rows: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        [row.append(1) for row in rows]  # a function of its own on 3.11
        return x * 2.0

    return step


def _generated(rows: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        any(row.append(1) for row in rows)  # a function of its own
        return x * 2.0

    return step


def _nested_comprehension(d: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        {k: [row.append(1) for row in rows] for k, rows in d.items()}
        return x * 2.0

    return step


def _shuffled_by_random(buf: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        random.shuffle(buf)
        return x * 2.0

    return step


def _shuffled_by_numpy(buf: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        np.random.shuffle(buf)  # a list too, in place
        return x * 2.0

    return step


def _shuffled(after: list[Any]) -> bool:
    """Whether a list is `list(range(20))` shuffled: not in order (one chance in
    20!), and all there."""
    return after != list(range(20)) and sorted(after) == list(range(20))


# What the maker's variable is named, what the user's container starts as and
# holds after one run (or a test of it), and one holding a float (`None`: a
# set, a leaf to JAX, never rebuilt).
_Case = tuple[
    Callable[[Any], Callable[[Any], Any]],
    str,
    Callable[[], Any],
    Any,
    "Callable[[], Any] | None",
]
_SEEN: dict[str, _Case] = {
    "push(buf, 1), push = heappush": (_aliased_push, "buf", list, [1], lambda: [0.5]),
    "hq.heappush(buf, 1)": (_module_alias, "buf", list, [1], lambda: [0.5]),
    "b.insort(buf, 1)": (
        _bisect_alias,
        "buf",
        lambda: [0, 2],
        [0, 1, 2],
        lambda: [0.5],
    ),
    "from heapq import heappush as put (inside)": (
        _imported_inside,
        "buf",
        list,
        [1],
        lambda: [0.5],
    ),
    "import bisect as bs (inside)": (
        _module_imported_inside,
        "buf",
        lambda: [0, 2],
        [0, 1, 2],
        lambda: [0.5],
    ),
    "list.append(buf, 1)": (_unbound_append, "buf", list, [1], lambda: [0.5]),
    "list.extend(buf, xs)": (_unbound_extend, "buf", list, [1, 2], lambda: [0.5]),
    "dict.update(d, other)": (_unbound_update, "d", dict, {"k": 1}, lambda: {"w": 0.5}),
    "set.add(s, 1)": (_unbound_add, "s", set, {1}, None),
    "add = list.append; add(buf, 1)": (
        _local_method_alias,
        "buf",
        list,
        [1],
        lambda: [0.5],
    ),
    "app(buf, 1), app = list.append": (
        _global_method_alias,
        "buf",
        list,
        [1],
        lambda: [0.5],
    ),
    "for row in rows: row.append(1)": (
        _iterated_rows,
        "rows",
        lambda: [[], [2]],
        [[1], [2, 1]],
        lambda: [[1.5], [0.5]],
    ),
    "for _, row in d.items(): row.append(1)": (
        _iterated_items,
        "d",
        lambda: {"a": [], "b": [2]},
        {"a": [1], "b": [2, 1]},
        lambda: {"a": [1.5], "b": [0.5]},
    ),
    "for row in d.values(): row.append(1)": (
        _iterated_values,
        "d",
        lambda: {"a": []},
        {"a": [1]},
        lambda: {"a": [0.5]},
    ),
    "for i, row in enumerate(rows)": (
        _enumerated,
        "rows",
        lambda: [[], []],
        [[0], [1]],
        lambda: [[0.5]],
    ),
    "for row, k in zip(rows, ks)": (
        _zipped,
        "rows",
        lambda: [[], []],
        [[0], [1]],
        lambda: [[0.5]],
    ),
    "state.get('log').append(1)": (
        _got,
        "state",
        lambda: {"log": [], "n": 2},
        {"log": [1], "n": 2},
        lambda: {"log": [0.5]},
    ),
    "state.get(key).append(1)": (
        _got_by_computed_key,
        "state",
        lambda: {"log": []},
        {"log": [1]},
        lambda: {"log": [0.5]},
    ),
    "d.setdefault('log', []).append(1)": (
        _set_default,
        "d",
        lambda: {"log": [2]},
        {"log": [2, 1]},
        lambda: {"w": 0.5},  # (`d` itself is mutated when it has no 'log')
    ),
    "next(iter(rows)).append(1)": (
        _next_of_iter,
        "rows",
        lambda: [[]],
        [[1]],
        lambda: [[0.5]],
    ),
    "list(rows)[0].append(1), rows[:][0].append(1)": (
        _item_of_a_copy,
        "rows",
        lambda: [[]],
        [[1, 1]],
        lambda: [[0.5]],
    ),
    "rows.pop().append(1)": (_popped, "rows", lambda: [[2]], [], lambda: [[0.5]]),
    "[row.append(1) for row in rows]": (
        _comprehended,
        "rows",
        lambda: [[], [2]],
        [[1], [2, 1]],
        lambda: [[0.5]],
    ),
    "any(row.append(1) for row in rows)": (
        _generated,
        "rows",
        lambda: [[], [2]],
        [[1], [2, 1]],  # (`append` gives `None`: `any` goes on to the end)
        lambda: [[0.5]],
    ),
    "{k: [row.append(1) for row in rows] for k, rows in d.items()}": (
        _nested_comprehension,
        "d",
        lambda: {"a": [[], [2]]},
        {"a": [[1], [2, 1]]},
        lambda: {"a": [[0.5]]},
    ),
    "random.shuffle(buf)": (
        _shuffled_by_random,
        "buf",
        lambda: list(range(20)),
        _shuffled,
        lambda: [0.5 + i for i in range(20)],  # (not shuffled into its order)
    ),
    "np.random.shuffle(buf)": (
        _shuffled_by_numpy,
        "buf",
        lambda: list(range(20)),
        _shuffled,
        lambda: [0.5 + i for i in range(20)],
    ),
}

_RUN: dict[str, Callable[[Callable[[Any], Any]], Any]] = {
    "eager": lambda step: lift.lift(step)(2.0),
    "jax.jit": lambda step: jax.jit(lambda g, x: g(x))(lift.lift(step), 2.0),
    "lift.jit": lambda step: lift.jit(step)(2.0),
}


# Each spelling through one way of running it, in turn (every way runs a third
# of the spellings), and its refusal below through the next way.
_SEEN_RUN: Final = dict(in_turn(list(_SEEN), list(_RUN)))


@pytest.mark.parametrize(("case", "consumer"), list(_SEEN_RUN.items()))
def test_a_seen_mutation_reaches_the_users_container(case: str, consumer: str) -> None:
    make, _, start, after, _ = _SEEN[case]
    changed = after if callable(after) else after.__eq__
    c = start()
    assert float(_RUN[consumer](make(c))) == 4.0
    assert changed(c)  # the user's own object, changed once (one trace)


def _refusal(step: Callable[[Any], Any], name: str) -> str:
    """What a refusal of `step` says first: the function, its file:line, the
    variable."""
    code = step.__code__
    where = f"{step.__qualname__} ({code.co_filename}:{code.co_firstlineno})"
    # Under a transform, code that compares the leaves (`insort`) is refused
    # for that first, by the same words.
    return re.escape(f"{where} ") + rf"(mutated|uses) the captured variable {name!r}"


@pytest.mark.parametrize(
    ("case", "consumer"),
    [
        (k, [*_RUN][([*_RUN].index(_SEEN_RUN[k]) + 1) % len(_RUN)])
        for k, v in _SEEN.items()
        if v[4] is not None
    ],
)
def test_a_seen_mutation_of_a_rebuilt_container_is_refused(
    case: str, consumer: str
) -> None:
    make, name, _, _, dynamic = _SEEN[case]
    assert dynamic is not None
    c = dynamic()
    before = repr(c)
    step = make(c)
    with pytest.raises(lift.LiftError, match=_refusal(step, name)):
        _RUN[consumer](step)
    assert repr(c) == before  # nothing ran on a copy


def _aliased_reader(buf: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        return x * at(buf, 0) + ops.getitem(buf, 1)  # read, by alias

    return step


def _unbound_readers(buf: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        size = list.__len__
        return x * (list.__getitem__(buf, 0) + sum(list.copy(buf)) + size(buf))

    return step


def _unbound_dict_reader(d: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        return x * dict.get(d, "w") + len(dict.keys(d))

    return step


def _rows_read(rows: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        total = 0
        for row in rows:
            total += len(row)
        for i, row in enumerate(rows):
            total += i * len(row)
        return x * total

    return step


def _items_read(d: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        total = x * 0.0
        for name, row in d.items():
            name += "/"  # a new string: the key is not `d`'s item
            total = total + row[0] * len(name)
        return total + sum(row[0] for row in d.values())

    return step


def _got_read(state: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        log = state.get("log") + [x]  # noqa: RUF005 (a new list)
        log.append(x)
        return x * state.get("log")[0] + len(log) + next(iter(state["log"]))

    return step


def _comprehensions_read(rows: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        sizes = [len(row) for row in rows]
        sizes.append(0)  # the comprehension's list
        return x * (sum(len(row) for row in rows) + sum(sizes))

    return step


def _copies_mutated(rows: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        copy = list(rows)
        copy.append([x])  # the copy, not `rows`
        part = rows[:1]
        part.append([x])
        first, *rest = rows
        rest.append(first)
        return x * (len(copy) + len(part) + len(rest))

    return step


# Read with the same shapes (all containers hold a float: mutating them would
# be refused), and not mutated.
_CLEAN: dict[str, tuple[Callable[[Any], Callable[[Any], Any]], Callable[[], Any]]] = {
    "at(buf, 0), ops.getitem(buf, 1)": (_aliased_reader, lambda: [0.5, 1.5]),
    "list.copy(buf), size = list.__len__": (_unbound_readers, lambda: [0.5, 1.5]),
    "dict.get(d, k), dict.keys(d)": (_unbound_dict_reader, lambda: {"w": 0.5}),
    "for row in rows: total += len(row)": (_rows_read, lambda: [[0.5], [1.5, 2.5]]),
    "for name, row in d.items(): name += '/'": (
        _items_read,
        lambda: {"a": [0.5], "b": [1.5]},
    ),
    "state.get('log') + [x], next(iter(...))": (
        _got_read,
        lambda: {"log": [0.5]},
    ),
    "[len(row) for row in rows].append(0), sum(len(row) for row in rows)": (
        _comprehensions_read,
        lambda: [[0.5], [1.5]],
    ),
    "copy = list(rows); copy.append(x), rows[:1], *rest": (
        _copies_mutated,
        lambda: [[0.5], [1.5]],
    ),
}


@pytest.mark.parametrize("consumer", list(_RUN))
@pytest.mark.parametrize("case", list(_CLEAN))
def test_a_clean_twin_is_not_refused(case: str, consumer: str) -> None:
    make, start = _CLEAN[case]
    expected = make(start())(2.0)
    c = start()
    before = repr(c)
    assert np.allclose(_RUN[consumer](make(c)), expected)
    assert repr(c) == before
