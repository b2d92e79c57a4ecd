"""The copies a rebuilt function holds, and the check after each call.

SPEC 1: side effects reach your objects. A captured list or dict holding
dynamic leaves is rebuilt around them, so the lifted function holds a copy.
Code that mutates the copy in place leaves your object as it was. The call
shows it, however the code reached the copy: a method, an item store, your
own function, `max(rows, key=len)`, an attribute set on a registered node.
The rebuilt function keeps the items each copy was built with. After every
call of the `Lifted`, eager or traced, a copy whose items changed is refused.
The `LiftError` names the function, its `file:line`, the variable and the fix.
Your object is never touched. The copies are dropped, and the next call
builds the function afresh. A generator's or coroutine's body runs after the
call returns: its copies are checked when it finishes
(`lift._copies.generators`).
"""

from __future__ import annotations

import collections
import functools
import itertools
from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple, TypeAlias, cast

from .._base.caches import per_class
from .._base.errors import LiftError, code_of, describe
from .._compat import CUSTOM_NODES
from .._holders.attributes import own_attributes
from .._holders.closure import default_factory, slots_of
from .._holders.labels import ATTR, SELF, Label
from .._holders.reach import items, reach
from .._holders.trees import flatten_checked, slot_path, tree_flatten
from .._skeleton.nodes import CellNode, FunctionNode, Node, Template
from .._skeleton.skeleton import Skeleton
from .own import OWN_CONTAINERS

# The containers that can change in place.
_MUTABLE: Final = (list, dict, set, bytearray, collections.deque)


class Copy(NamedTuple):
    """A list, dict or registered pytree node a rebuilt function holds."""

    value: Any
    is_node: bool  # a registered pytree node, not a list or dict
    state: tuple[Any, ...]  # what it held when it was built (`_state`)
    template: Template  # the capture it belongs to
    # The rebuilt function whose variable `label` leads to the copy, by `path`
    # (`.args[0]` of a partial it captures: `push.args[0]`), or, at the root,
    # the partial or bound method holding it.
    owner: Any
    label: Label
    path: str
    # A node's: the containers in its attributes that its `tree_unflatten`
    # made anew (not its children, nor what its aux data or a default shares
    # with your object), each with the attribute it is in and its items.
    inner: tuple[tuple[str, Any, tuple[Any, ...]], ...] = ()
    # A list's or dict's: whether it holds a dynamic leaf or a function itself
    # (else it is rebuilt as the child of a pytree node that lift rebuilds).
    holds: bool = True
    # The attributes (`__dict__`) of a rebuilt function (`owner`), which code
    # may set (`f.calls = f.calls + 1`).
    attributes: bool = False


Copies: TypeAlias = tuple[Copy, ...]


def copies_in(
    made: Sequence[tuple[Template, Any]],
    leaves: Sequence[Any],
    objs: Sequence[Any],
    skeleton: Skeleton,
) -> Copies:
    """The copies that the captures `made` hold.

    `made` pairs each template with the value it was built as, from `leaves`
    and the rebuilt nodes `objs` of `skeleton`. A copy is what the structure
    rebuilds: a list, a dict, or a registered node. What fills a slot is not:
    a static value is your own object. A node counts when it can change (not
    a tuple, a frozen dataclass or an `equinox.Module`). It must also flatten
    to the same children every time. A template that rebuilds none is marked,
    and never passed again. Then come the rebuilt functions' attributes
    (`_attribute_copies`)."""
    nodes, parents = skeleton.nodes, skeleton.parents
    out: list[Copy] = []
    for template, value in made:
        slots = {id(v) for v in template.slot_values(leaves, objs)}
        found: list[tuple[Any, bool]] = []

        def is_leaf(x: Any) -> bool:
            if id(x) in slots:
                return True
            t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
            if t in OWN_CONTAINERS:  # JAX flattens them as nodes: rebuilt
                found.append((x, False))
            elif t in CUSTOM_NODES and _may_change(t):
                found.append((x, True))
            return False

        if flatten_checked(value, is_leaf) is None or not found:
            template.copies = False
            continue
        owner, label, path = _holder(template, nodes, parents, objs)
        for x, is_node in found:
            state, again = _state(x, is_node), _state(x, is_node)
            if state is None or again is None or not _same(state, again):
                continue
            inner = (
                tuple((a, c, _contents(c)) for a, c in _made_anew(x)) if is_node else ()
            )
            holds = not is_node and any(
                id(v) in slots
                for v in (flatten_checked(x, lambda y: id(y) in slots) or ((),))[0]
            )
            out.append(
                Copy(x, is_node, state, template, owner, label, path, inner, holds)
            )
    if skeleton.has_attributes:
        out += _attribute_copies(nodes, objs)
    return tuple(out)


def _attribute_copies(nodes: Sequence[Node], objs: Sequence[Any]) -> list[Copy]:
    """The attributes of each rebuilt function that has some of its own.

    `functools.wraps`'s dunders do not count. A function that sets one while
    it runs sets it on lift's function, not on yours."""
    out: list[Copy] = []
    for node, fn in zip(nodes, objs, strict=True):
        own = node.own_attribute() if type(node) is FunctionNode else None
        if own is not None:
            d, (label, template) = fn.__dict__, own
            c = Copy(d, False, _contents(d), template, fn, label, "", attributes=True)
            out.append(c)
    return out


def _holder(
    template: Template,
    nodes: Sequence[Node],
    parents: Sequence[tuple[Template, int] | None],
    objs: Sequence[Any],
) -> tuple[Any, Label, str]:
    """Who a refusal names for a copy in `template`.

    That is the function whose variable leads to the copy, through partials,
    bound methods and function attributes. With it come the variable's label
    and the path from it (`''` when the copy is the variable's value)."""
    path = ""
    t = template
    while True:  # up the parents (each made before its child): to a cell or the root
        index = t.owner
        node = nodes[index]
        if type(node) is CellNode:
            return objs[node.owner], t.label, path
        parent = parents[index]
        if parent is None or (type(node) is FunctionNode and t.label.kind != ATTR):
            return objs[index], t.label, path
        # A partial's argument, a method's object, a function's attribute:
        # named from the variable holding that partial, method or function.
        step = f".{t.label.key}" if t.label.kind == ATTR else t.label.text
        t, pos = parent
        path = slot_path(t.treedef, pos) + step + path


# Node classes whose instances your code cannot change in place, registered by
# the module that defines them (`Lifted`: setting an attribute is refused, and
# its slots hold lift's own caches, which a call fills).
_NEVER_CHANGE: list[type[Any]] = []


def never_changes(cls: type[Any]) -> None:
    """Register `cls`: its instances are not watched as copies."""
    _NEVER_CHANGE.append(cls)


def _may_change(t: type[Any]) -> bool:
    """Whether instances of the pytree node class `t` can change in place.

    `None` cannot: to JAX it is a node, one object shared by all."""
    if issubclass(t, (tuple, type(None), *_NEVER_CHANGE)):
        return False
    params = getattr(t, "__dataclass_params__", None)
    return not getattr(params, "frozen", False)


def _state(x: Any, is_node: bool) -> tuple[Any, ...] | None:
    """What a copy holds, or `None` if it cannot be read.

    A container's `_contents`. A node's treedef one level deep, its children
    and its attributes, slots included."""
    if not is_node:
        return _contents(x)
    try:
        children, treedef = tree_flatten(x, is_leaf=lambda y: y is not x)  # pyright: ignore[reportUnknownLambdaType]
        attributes = _attributes(x)
    except Exception:  # a node that fails to flatten: nothing to compare
        return None
    return (treedef, *children, *itertools.chain.from_iterable(attributes))


def _attributes(x: Any) -> list[tuple[Any, Any]]:
    """The attributes of the node `x`: its `__dict__`'s and its set slots.

    A `functools.cached_property` does not count. Reading one on lift's copy
    fills a cache, which changes nothing you would see."""
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    cached = _cached_properties(t)
    return [
        (name, v) for name, v in own_attributes(x, slots_of(t)) if name not in cached
    ]


@per_class
def _cached_properties(t: type[Any]) -> frozenset[str]:
    """The names of `t`'s `functools.cached_property`s."""
    return frozenset(
        name
        for klass in t.__mro__
        for name, attr in vars(klass).items()
        if isinstance(attr, functools.cached_property)
    )


def _made_anew(x: Any) -> list[tuple[str, Any]]:
    """The mutable containers in `x`'s attributes that its unflatten makes anew.

    Each comes with its attribute. A second unflattening of `x`'s children
    does not share them. A container it shares (from the aux data, or a
    default) is your object's own, and a change to it reaches you."""
    mine = _mutable_in(_attributes(x))
    if not mine:
        return []
    try:
        children, treedef = tree_flatten(x, is_leaf=lambda y: y is not x)  # pyright: ignore[reportUnknownLambdaType]
        twin = treedef.unflatten(children)
        shared = {id(c) for _, c in _mutable_in(_attributes(twin))}
    except Exception:  # it unflattened once, to build `x`; cannot tell now
        return []
    return [(a, c) for a, c in mine if id(c) not in shared]


def _mutable_in(attributes: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The mutable containers reached from `attributes`, each once.

    Each comes with the attribute that holds it."""
    out: dict[int, tuple[str, Any]] = {}
    for a, v in attributes:
        for x in reach([v], items):
            if isinstance(x, _MUTABLE) and id(x) not in out:  # pyright: ignore[reportUnknownArgumentType]
                out[id(x)] = (a, x)  # pyright: ignore[reportUnknownArgumentType]
    return list(out.values())


def _contents(c: Any) -> tuple[Any, ...]:
    """What the mutable container `c` holds, in the form `_same` compares.

    A bytearray's bytes. A list's, set's or deque's items. A dict's keys and
    values, after a `defaultdict`'s factory (code may set it; JAX rebuilds it
    from the aux data)."""
    if isinstance(c, bytearray):
        return (bytes(c),)
    if isinstance(c, dict):
        d = cast("dict[Any, Any]", c)
        pairs = itertools.chain.from_iterable(d.items())
        if isinstance(c, collections.defaultdict):
            return (None, default_factory(d), *pairs)
        return (None, *pairs)
    return (None, *cast("Iterable[Any]", c))


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Whether two states are the same.

    Their first items are equal (a treedef, a bytearray's bytes). The others
    are the same objects."""
    if len(a) != len(b) or not (a[0] is b[0] or a[0] == b[0]):
        return False
    return all(x is y for x, y in zip(a[1:], b[1:], strict=True))


def changed_copy(copies: Copies) -> Copy | None:
    """The first copy whose state is not the one it was built with."""
    for copy in copies:
        now = _state(copy.value, copy.is_node)
        if now is None or not _same(copy.state, now) or _changed_inner(copy):
            return copy
    return None


def _changed_inner(copy: Copy) -> tuple[str, Any] | None:
    """The first container made anew in a node's attribute that changed.

    It comes with that attribute."""
    for attribute, c, then in copy.inner:
        if not _same(then, _contents(c)):
            return attribute, c
    return None


def refuse_changed(copy: Copy, *, between_calls: bool = False) -> LiftError:
    """The error for a call that changed `copy`.

    With `between_calls`, the copy changed before a call began, through a
    value an earlier call gave out. No code of the function changed it."""
    owner, label, path = copy.owner, copy.label, copy.path
    if copy.attributes:
        return _refuse_attribute(copy, between_calls)
    what = type(copy.value).__name__
    name = label.variable
    if name is None and label.kind == SELF:  # a bound method's: its first parameter
        code = getattr(getattr(owner, "__func__", None), "__code__", None)
        name = code.co_varnames[0] if code is not None and code.co_varnames else None
    variable = (
        f"the captured variable {name!r}"
        if name
        else f"its capture `{label.text.lstrip('.')}`"
    )
    if name and path:
        variable += f" (at `{name}{path}`)"
    who = describe(owner)
    if isinstance(owner, functools.partial) and code_of(owner) is None:
        # A partial of a builtin (`partial(list.append, buf)`): its repr would
        # print the copy.
        func: Any = owner.func
        who = f"functools.partial({getattr(func, '__qualname__', '…')}, …)"

    passed = f"pass {name!r} as an argument" if name else "pass it as an argument"
    if copy.is_node:
        held = ", a pytree node that lift rebuilds around its leaves"
        if (anew := _changed_inner(copy)) is not None:
            attribute, c = anew
            held += (
                f", and its attribute `{attribute}` holds a "
                f"{type(c).__name__} that {what}'s `tree_unflatten` makes anew"
            )
        fix = (
            f"{passed} and return the new value (`dataclasses.replace`), or keep "
            "what the code changes outside the pytree node (a list without "
            "arrays, or an object that is not a pytree)"
        )
    else:
        held = (
            " that lift rebuilds around its leaves (it holds dynamic values, or "
            "functions capturing some)"
            if copy.holds
            else " that sits in a pytree node, which lift rebuilds around its leaves"
        )
        fix = (
            f"{passed} and return what the code adds to it, or keep only static "
            f"values in the {what} (one without arrays or floats, in it or its "
            "functions, is your own object inside the lifted function)"
        )
    message = (
        f"lift's copy of {variable} of {who} changed between "
        f"two calls: a {what}{held}, and an earlier call gave it out (returned "
        f"it, or stored it where your code reached it), so a change made to "
        f"that value reached lift's copy and your {what} did not change.\n"
        f"Fix: return a copy of it (`{what}(...)`), or {passed}."
        if between_calls
        else f"{who} mutated {variable} in place while it ran: a {what}"
        f"{held}, so the change reached lift's copy and your {what} did not "
        f"change.\nFix: {fix}."
    )
    return LiftError(message, anchor="mutates-a-rebuilt-container")


def _refuse_attribute(copy: Copy, between_calls: bool) -> LiftError:
    """The error for a rebuilt function whose attributes changed."""
    before = dict(zip(copy.state[1::2], copy.state[2::2], strict=True))
    now: dict[str, Any] = copy.value
    key = next(
        (k for k in {**before, **now} if before.get(k, _GONE) is not now.get(k, _GONE)),
        "?",
    )
    who = describe(copy.owner)
    name = getattr(copy.owner, "__name__", "f")
    when = "between two calls" if between_calls else "while it ran"
    return LiftError(
        f"{who} set its attribute {key!r} {when}: lift rebuilds the function "
        f"with attributes of its own, so the change reached lift's function and "
        f"yours did not change.\nFix: keep what changes in a list or dict "
        f"attribute changed in place (`{name}.{key}[0] += 1`, holding no arrays "
        f"or floats: your own object inside the lifted function), or pass it as "
        f"an argument and return the new value.",
        anchor="mutates-a-rebuilt-container",
    )


_GONE: Final = object()
