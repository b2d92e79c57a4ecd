"""The lists and dicts a rebuilt function holds as copies, and the check that a
call left them as they were (SPEC 1: side effects reach the user's objects).

A captured list or dict that holds dynamic leaves is rebuilt around them: the
lifted function holds a copy. Code that mutates it in place would change the
copy, not the user's object. `lift._mutation` reads the code for that and
refuses when it lifts; what the reading does not see (the mutation through a
call of the user's own function, a method of a display, the result of
`max(rows, key=len)`) the call itself shows: the rebuilt function keeps, for
each copy it holds, the items it was built with, and after every call of the
`Lifted` (eagerly, or while a transform traces it) a copy whose items are no
longer those is refused with a `LiftError` naming the function and the
variable. The user's object was never touched; the copies are dropped, and the
next call builds the function afresh.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Sequence
from typing import Any, Final, TypeAlias, cast

from ._compat import CUSTOM_NODES
from ._errors import LiftError, describe
from ._labels import SELF
from ._nodes import CellNode, Node, Template
from ._trees import flatten_checked, tree_flatten

__all__ = ["REBUILT_TYPES", "Copies", "changed_copy", "copies_in", "refuse_changed"]

# The lists and dicts JAX flattens as nodes, so that lift rebuilds them around
# their leaves: `dict`'s subclasses `OrderedDict` and `defaultdict` too.
REBUILT_TYPES: Final = frozenset(
    {list, dict, collections.OrderedDict, collections.defaultdict}
)

# A copy, whether it is a registered pytree node (not a list or dict), its
# state when it was built (`_state`), the capture it belongs to, and the
# rebuilt function (or partial) holding that capture.
Copy: TypeAlias = tuple[Any, bool, tuple[Any, ...], Template, Any]
Copies: TypeAlias = tuple[Copy, ...]


def copies_in(
    made: Sequence[tuple[Template, Any]],
    leaves: Sequence[Any],
    objs: Sequence[Any],
    nodes: Sequence[Node],
) -> Copies:
    """The lists, dicts and registered pytree nodes that the captures `made`
    (each template with the value it was materialized as, from `leaves` and
    the rebuilt nodes `objs` of `nodes`) hold as copies: those their structure
    rebuilds, not what fills a slot (a static value is the user's own object);
    of the nodes, those that can change (not a tuple, a frozen dataclass or an
    `equinox.Module`) and flatten to the same children every time. A template
    that rebuilds none is marked, and never passed again."""
    out: list[Copy] = []
    for template, value in made:
        slots = {id(v) for v in template.slot_values(leaves, objs)}
        found: list[tuple[Any, bool]] = []

        def is_leaf(
            x: Any, slots: set[int] = slots, found: list[tuple[Any, bool]] = found
        ) -> bool:
            if id(x) in slots:
                return True
            t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
            if t in REBUILT_TYPES:
                found.append((x, False))
            elif t in CUSTOM_NODES and _may_change(t):
                found.append((x, True))
            return False

        if flatten_checked(value, is_leaf) is None or not found:
            template.copies = False
            continue
        node = nodes[template.owner]
        owner = objs[node.owner if type(node) is CellNode else template.owner]
        for x, is_node in found:
            state, again = _state(x, is_node), _state(x, is_node)
            if state is not None and again is not None and _same(state, again):
                out.append((x, is_node, state, template, owner))
    return tuple(out)


def _may_change(t: type[Any]) -> bool:
    """Whether instances of the pytree node class `t` can be changed in place."""
    if issubclass(t, tuple):
        return False
    params = getattr(t, "__dataclass_params__", None)
    return not getattr(params, "frozen", False)


def _state(x: Any, is_node: bool) -> tuple[Any, ...] | None:
    """What a copy holds: a list's items, a dict's keys and values; a node's
    treedef one level deep, its children and its attributes (`None` if it
    cannot be read)."""
    if not is_node:
        if isinstance(x, dict):
            pairs = cast("dict[Any, Any]", x).items()
            return (None, *itertools.chain.from_iterable(pairs))
        return (None, *cast("list[Any]", x))
    try:
        children, treedef = tree_flatten(x, is_leaf=lambda y: y is not x)  # pyright: ignore[reportUnknownLambdaType]
        attributes = cast("dict[str, Any]", vars(x) if hasattr(x, "__dict__") else {})
    except Exception:  # a node that fails to flatten: nothing to compare
        return None
    return (treedef, *children, *itertools.chain.from_iterable(attributes.items()))


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Whether two states are the same: their items by identity, their
    treedefs equal."""
    if len(a) != len(b) or not (a[0] is b[0] or a[0] == b[0]):
        return False
    return all(x is y for x, y in zip(a[1:], b[1:], strict=True))


def changed_copy(copies: Copies) -> Copy | None:
    """The first copy whose state is not the one it was built with."""
    for copy in copies:
        x, is_node, state, _, _ = copy
        now = _state(x, is_node)
        if now is None or not _same(state, now):
            return copy
    return None


def refuse_changed(copy: Copy, *, between_calls: bool = False) -> LiftError:
    """The error for a call that changed `copy`; `between_calls`: for a copy
    found changed before a call began (through a value an earlier call gave
    out), which no code of the function changed."""
    x, is_node, _, template, owner = copy
    what = type(x).__name__
    label = template.label
    name = label.variable
    if name is None and label.kind == SELF:  # a bound method's: its first parameter
        code = getattr(getattr(owner, "__func__", None), "__code__", None)
        name = code.co_varnames[0] if code is not None and code.co_varnames else None
    variable = (
        f"the captured variable {name!r}"
        if name
        else f"its capture `{label.text.lstrip('.')}`"
    )
    passed = f"pass {name!r} as an argument" if name else "pass it as an argument"
    if is_node:
        held = ", a pytree node that lift rebuilds around its leaves"
        fix = (
            f"{passed} and return the new value (`dataclasses.replace`), or keep "
            "what the code changes outside the pytree node (a list without "
            "arrays, or an object that is not a pytree)"
        )
    else:
        held = (
            " that lift rebuilds around its leaves (it holds dynamic values or "
            "functions)"
        )
        fix = (
            f"{passed} and return what the code adds to it, or keep only static "
            f"values in the {what} (one without arrays, floats or functions is "
            "your own object inside the lifted function)"
        )
    if between_calls:
        return LiftError(
            f"lift's copy of {variable} of {describe(owner)} changed between "
            f"two calls: a {what}{held}, and an earlier call gave it out (returned "
            f"it, or stored it where your code reached it), so a change made to "
            f"that value reached lift's copy and your {what} did not change.\n"
            f"Fix: return a copy of it (`{what}(...)`), or {passed}.",
            anchor="mutates-a-rebuilt-container",
        )
    return LiftError(
        f"{describe(owner)} mutated {variable} in place while it ran: a {what}"
        f"{held}, so the change reached lift's copy and your {what} did not "
        f"change.\nFix: {fix}.",
        anchor="mutates-a-rebuilt-container",
    )
