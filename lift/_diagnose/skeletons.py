"""`lift.diff` of two skeletons, node by node.

The walk of `diff` meets a pair of nodes. It compares their facts, then their
captures. Each line says the key path, then what stands there in each. A static
shows both values and why it is static."""

from __future__ import annotations

import contextlib
import dataclasses
import struct
import types
from typing import Any, Final, cast

import numpy as np

from .._base.errors import static_str
from .._compat import treedef_text
from .._holders.closure import PARTIAL, custom_data
from .._holders.trees import is_function_like
from .._lifted.lift import is_lifted
from .._rule.static import DynamicNames, default_dynamic
from .._skeleton.nodes import FunctionNode, Ref, Static, Template
from .._skeleton.skeleton import Skeleton

# A path longer than this (functions nested thousands deep) keeps its start and
# end around ` ... `: each step then costs the same, however deep the walk.
PATH_CHARS: Final = 1000
LIMIT: Final = 80  # as `static_str` cuts a value
_REORDERED: Final = (
    "the same keys in another order: lift keeps a dict's insertion order, as "
    "Python iterates it, so each order is its own program"
)


def a_or_an(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def by_identity(value: Any) -> bool:
    """Whether `==` on `value` is identity: its class has no `__eq__` of its own."""
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    return getattr(t, "__eq__", None) is object.__eq__


def static_unequal(u: Any, v: Any) -> tuple[bool, str]:
    """Whether JAX's `==` finds statics `u` and `v` different, and why.

    The why is for values that look alike. An object may compare by identity.
    An `__eq__` may raise or answer with an array: taken as different."""
    if u is v:
        return False, ""
    noun = a_or_an(type(u).__name__)
    try:
        eq = u == v
        if type(eq) is not bool and getattr(eq, "shape", None) not in (None, ()):
            return True, (
                f"{noun}'s `==` answers with an array, not True or False: taken as "
                "different"
            )
        unequal = not bool(eq)
    except Exception as err:
        return True, (
            f"comparing {noun} with `==` raised {type(err).__name__}: taken as "
            "different"
        )
    if unequal and type(v) is type(u) and by_identity(u) and not is_function(u):
        return True, (
            f"{noun} has no `__eq__` of its own: compared by identity, so each new "
            "one compiles anew"
        )
    return unequal, ""


def is_function(v: Any) -> bool:
    return is_function_like(v) or is_lifted(v)


def join_path(path: str, more: str) -> str:
    path += more
    if len(path) > PATH_CHARS:
        path = f"{path[:300]} ... {path[-(PATH_CHARS - 305) :]}"
    return path


def at_path(path: str) -> str:
    """`path: ` before a message, nothing at the top of the tree."""
    return f"{path}: " if path else ""


@dataclasses.dataclass(slots=True, eq=False)
class Slot:
    """What stands in one slot of a capture, as the walk of `diff` meets it.

    It is a leaf (`int`), a node (`Ref`), a `Static`, or `None`. `None` is an
    empty closure cell. It is not a pytree: the walk takes it whole."""

    skeleton: Skeleton
    owner: int  # the node holding the capture
    name: str  # its variable, or "it"
    slot: int | Ref | Static | None


def rebuilt(
    skeleton: Skeleton, owner: int, name: str, template: Template | None
) -> Any:
    """A capture rebuilt with a `Slot` in each slot.

    The walk then goes into it as into any pytree."""
    if template is None:
        return Slot(skeleton, owner, name, None)
    return template.unflatten([Slot(skeleton, owner, name, s) for s in template.slots])


SHARED: Final = (
    "the same functions and values, shared differently (one object captured in "
    "two places in one, two equal objects in the other)"
)


def _node_name(skeleton: Skeleton, index: int) -> str:
    """A node as people know it: `qualname (file:line)`, `functools.partial(f)`."""
    node = skeleton.nodes[index]
    if isinstance(node, FunctionNode):
        code = node.info.code
        return f"{node.qualname} ({code.co_filename}:{code.co_firstlineno})"
    func: Template = cast(Any, node).func  # a partial's, method's or holder's
    ref = func.slots[0] if len(func.slots) == 1 else None
    held = skeleton.nodes[ref.index] if type(ref) is Ref else None
    return f"{node.kind}({held.qualname if type(held) is FunctionNode else '...'})"


def _owner(skeleton: Skeleton, index: int) -> str:
    """` (in qualname at file:line)`: the function holding a capture."""
    node = skeleton.nodes[index]
    if isinstance(node, FunctionNode):
        code = node.info.code
        return f" (in {node.qualname} at {code.co_filename}:{code.co_firstlineno})"
    return f" (in {node.kind})"


def _facts(node: Any) -> list[tuple[str, Any, Any, str]]:
    """What two nodes of one kind compare besides their parts.

    Each fact is `(name, compared value, shown value, why alike differ)`."""
    if isinstance(node, FunctionNode):
        defaults = (node.has_defaults, node.has_kwdefaults)
        return [
            ("is named", (node.name, node.qualname), node.qualname, ""),
            (
                "reads the globals of module",
                id(node.globals),
                node.globals.get("__name__"),
                "two dicts: the module was loaded twice",
            ),
            ("has docstring, module, annotations", node.meta, node.meta.value, ""),
            ("has __defaults__, __kwdefaults__ not None:", defaults, defaults, ""),
        ]
    # Else a holder: `diff_node` reaches nodes through `Ref` slots, which hold
    # functions and holders only (a function reaches its cells by index).
    if node.holder is PARTIAL:
        return [("is of class", node.static, node.static, "")]
    return [("has options", Static(node.static), node.static, "two objects")]


def diff_node(
    path: str,
    x: tuple[Skeleton, int],
    y: tuple[Skeleton, int],
    lines: list[str],
    stack: list[tuple[str, Any, Any]],
) -> None:
    """Two nodes at one path: what they are, then capture by capture."""
    (sa, ia), (sb, ib) = x, y
    na, nb = sa.nodes[ia], sb.nodes[ib]
    if na.kind != nb.kind:
        lines.append(
            f"{at_path(path)}a {na.kind} ({_node_name(sa, ia)}) in one, a {nb.kind} "
            f"({_node_name(sb, ib)}) in the other"
        )
        return
    if isinstance(na, FunctionNode):
        ca, cb = na.info, cast(FunctionNode, nb).info
        if ca.code is not cb.code and (ca.hash != cb.hash or ca.code != cb.code):
            name_a, name_b = _node_name(sa, ia), _node_name(sb, ib)
            same = name_a == name_b and na.qualname == cast(FunctionNode, nb).qualname
            lines.append(
                f"{path + ' is a' if path else 'two'} different function"
                f"{'' if path else 's'}: {name_a} vs {name_b}"
                + (" (same name and line, different code)" if same else "")
            )
            return
    for (what, ka, va, why), (_, kb, vb, _) in zip(_facts(na), _facts(nb), strict=True):
        if ka != kb:
            ta, tb = static_str(va), static_str(vb)
            alike = f" ({why})" if ta == tb and why else ""
            lines.append(
                f"{at_path(path)}{_node_name(sa, ia)} {what} {ta} in one, {tb} in the "
                f"other{alike}"
            )
    pa = {label.ident: (label, t) for label, t in sa.parts_of(ia)}
    pb = {label.ident: (label, t) for label, t in sb.parts_of(ib)}
    for one, other, side in ((pa, pb, "one"), (pb, pa, "the other")):
        only = [label for ident, (label, _) in one.items() if ident not in other]
        lines += [f"{path}{label.text}: captured in {side} only" for label in only]
    for ident, (label, ta) in pa.items():
        if ident in pb:
            where, name = join_path(path, label.text), label.variable or "it"
            both = _captures(where, name, (sa, ia, ta), (sb, ib, pb[ident][1]))
            if isinstance(both, str):
                lines.append(both)
            else:
                stack.append((where, both[0], both[1]))
    if list(pa) != list(pb) and pa.keys() == pb.keys():
        lines.append(f"{at_path(path)}the same captures, in another order")


def _captures(
    where: str,
    name: str,
    a: tuple[Skeleton, int, Template | None],
    b: tuple[Skeleton, int, Template | None],
) -> str | list[Any]:
    """Two captures of one name: a line to say, or both rebuilt.

    Each is `(skeleton, holder, template)`. The walk goes into rebuilt ones."""
    ta, tb = a[2], b[2]
    if ta is not None and tb is not None and _same_structure(ta, tb):
        if ta.order != tb.order:
            return (
                f"{where}: {name} holds {_shape(ta)} in one, {_shape(tb)} in the "
                f"other ({_REORDERED})"
            )
        if ta.aux != tb.aux:
            # Equal treedefs whose static data differs as statics do (`0.0`
            # and `-0.0`, `1` and `True`), which JAX's `==` does not see.
            return (
                f"{where}: {name} holds {_shape(ta)} in both, whose static (aux) "
                f"data differs: {_aux_str(ta)} vs {_aux_str(tb)}{_owner(*a[:2])}"
            )
    try:
        return [rebuilt(s, i, name, t) for s, i, t in (a, b)]
    except Exception:  # a pytree class whose unflatten checks its children
        held = [cast(Template, t) for _, _, t in (a, b)]
        if not _same_structure(*held):
            return (
                f"{where}: {name} holds {_shape(held[0])} in one, "
                f"{_shape(held[1])} in the other"
            )
        # The same structure: its slots in order, by their flat index.
        return [
            [Slot(s, i, name, u) for u in t.slots]
            for (s, i, _), t in zip((a, b), held, strict=True)
        ]


def _same_structure(a: Template, b: Template) -> bool:
    """Whether two templates hold the same structure.

    Both hold a single value, or their treedefs are equal."""
    ta, tb = a.treedef, b.treedef
    return ta is tb or (ta is not None and tb is not None and ta == tb)


def _shape(template: Template) -> str:
    if template.treedef is None:
        return "a single value"
    # Dicts as the rebuilt value holds them: in insertion order.
    text = treedef_text(
        template.treedef if template.order is None else template.order[0]
    )
    return text if len(text) <= 60 else text[:57] + "..."


def _aux_str(template: Template) -> str:
    """The static data of a template's custom nodes, as shown."""
    parts = [aux for _, aux in custom_data(template.treedef) if aux is not None]
    text = ", ".join(static_str(p) for p in parts)
    return text if len(parts) == 1 else f"({text})"


def diff_slots(
    path: str,
    x: Slot,
    y: Slot,
    lines: list[str],
    stack: list[tuple[str, Any, Any]],
    seen: set[tuple[int, int, int, int]],
) -> None:
    """Compare two slots at one path.

    Nodes are compared once per pair, following references in both graphs.
    A subgraph of another size elsewhere shifts nothing. Statics compare by
    value."""
    u, v, name = x.slot, y.slot, x.name
    if type(u) is Ref and type(v) is Ref:
        key = (id(x.skeleton), u.index, id(y.skeleton), v.index)
        if key not in seen:
            seen.add(key)
            diff_node(path, (x.skeleton, u.index), (y.skeleton, v.index), lines, stack)
    elif type(u) is Static and type(v) is Static and u != v:
        # The entry within the captured variable: `config['LR']`.
        mark = f"captures[{name!r}]"
        inner = path[path.rfind(mark) + len(mark) :] if mark in path else ""
        for at, a, b in _apart_parts(_keyed(u), _keyed(v)):
            whole = u.by_identity and not at
            lines.append(
                f"{path}{at}: {name}{inner}{at} = {_value_str(a)} vs {_value_str(b)}, "
                f"static because {_why_static(x.skeleton, name, a, whole, at)}"
                f"{_why_apart(a, b)}{_owner(x.skeleton, x.owner)}"
            )
    elif type(u) is not type(v):
        lines.append(
            f"{path}: {name} is {slot_str(x)} in one, {slot_str(y)} in the other"
            + _owner(x.skeleton, x.owner)
        )


def slot_str(x: Slot) -> str:
    """A slot as messages name it: `a leaf (dynamic)`, `static 3 (why)`."""
    slot, skeleton = x.slot, x.skeleton
    if type(slot) is int:
        return "a leaf (dynamic)"
    if type(slot) is Ref:
        node = skeleton.nodes[slot.index]
        return f"a {node.kind} ({_node_name(skeleton, slot.index)})"
    if type(slot) is Static:
        why = _why_static(skeleton, x.name, slot.value, slot.by_identity)
        return f"static {_value_str(_keyed(slot))} ({why})"
    return "not yet bound (an empty closure cell)"


def _keyed(slot: Static) -> Any:
    """A static as its `Lifted` was keyed with it.

    A list, dict or set kept whole may have changed since. It is read back
    from its key. Any other static is as it is."""
    if type(slot.value) in (list, dict, set) and not slot.by_identity:
        # A key of a kind not read back: the value as it is now.
        with contextlib.suppress(TypeError, ValueError, IndexError, RecursionError):
            return _keyed_value(slot.slot_key)
    return slot.value


def _value_str(value: Any) -> str:
    """A static as a diff shows it: a set in sorted order."""
    if type(value) is not set or not value:
        return static_str(value, LIMIT)
    text = "{" + ", ".join(sorted(map(static_str, cast("set[Any]", value)))) + "}"
    return text if len(text) <= LIMIT else text[: LIMIT - 3] + "..."


_PARTS: Final = 5  # differing entries of one static said, at most


def _apart_parts(a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    """Where two unequal statics differ, by key path (`['lr']`, `[0]`).

    It enters dicts with the same keys in one order. It enters lists and
    tuples of one length. It says `_PARTS` entries at most."""
    out: list[tuple[str, Any, Any]] = []
    stack = [("", a, b)]
    while stack and len(out) < _PARTS:
        at, u, v = stack.pop()
        keys = _keys(u) if type(u) is type(v) else []
        keys = keys if keys == _keys(v) else []
        parts = [(f"{at}[{k!r}]", u[k], v[k]) for k in keys]
        parts = [(k, x, y) for k, x, y in parts if Static(x) != Static(y)]
        if parts:
            stack.extend(reversed(parts))
        else:
            out.append((at, u, v))
    return out


def _keys(value: Any) -> list[Any]:
    """A dict's keys, a list's or tuple's indices, or none."""
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if t is dict:
        return list(value)
    return list(range(len(value))) if t in (list, tuple) else []


def _keyed_value(key: Any) -> Any:
    """The value a static key was made from.

    The key is a `static_key`, or the contents key of a kept container."""
    t: Any = key[0]
    rest: tuple[Any, ...] = key[1:]
    if t is list and len(rest) == 2:  # exact scalars, keyed in C (`atoms_key`)
        return list(rest[1])
    if t is dict and len(rest) == 4:
        return dict(zip(rest[1], rest[3], strict=True))
    if t in (list, tuple, set, frozenset):
        return cast("type[Any]", t)(map(_keyed_value, rest[0]))
    if t is dict:  # a contents key's items in pairs; a `static_key`'s flat
        items = rest[-1] if len(rest) == 2 else zip(*[iter(rest[0])] * 2, strict=True)
        return {_keyed_value(k): _keyed_value(v) for k, v in items}
    if t is float or t is complex:
        return t(*(struct.unpack("<d", bits)[0] for bits in rest))
    if type(t) is type and issubclass(t, np.generic):
        return np.frombuffer(rest[1], rest[0])[0]
    if type(rest[-1]) is (key[0] if len(rest) == 1 else rest[0]):
        return rest[-1]  # by value (`(int, 3)`), or by its own `__eq__`
    raise TypeError("not a key lift reads back")


def _why_apart(a: Any, b: Any) -> str:
    """`; why` two statics differ, when their values look alike.

    A dict may hold its keys in another order. An `__eq__` may fail."""
    if type(a) is dict and type(b) is dict:
        ka, kb = _keys(a), _keys(b)
        if ka != kb and len(ka) == len(kb) and set(ka) == set(kb):
            return f"; {_REORDERED}"
    why = "" if by_identity(a) else static_unequal(a, b)[1]  # else `_why_static`'s
    return f"; {why}" if why else ""


def _why_static(
    skeleton: Skeleton, name: str, value: Any, whole: bool, at: str = ""
) -> str:
    """Why a captured value, or an entry of one, is static.

    The reasons, in order: `static=`, `dynamic=`, identity, a rebinding, a
    branch, the type. `whole` marks an unhashable value, compared by identity."""
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    names, dynamic = skeleton.options or (frozenset[str](), None)
    noun = a_or_an(t.__name__)
    if name in names:
        return f"you declared it static (static=({name!r},))"
    if isinstance(dynamic, DynamicNames):
        return f"it is not named in `dynamic=` ({dynamic!r})"
    if dynamic is not None:
        return "your `dynamic=` predicate left it static"
    if whole or (by_identity(value) and not issubclass(t, (type, types.ModuleType))):
        how = "and unhashable" if whole else "with no `__eq__` of its own"
        return (
            f"it is {noun}, not a float or array, {how}: compared by identity, so "
            "each new object compiles anew"
        )
    infos = [n.info for n in skeleton.nodes if isinstance(n, FunctionNode)]
    floating = t in (float, complex) or default_dynamic(value)
    rebinds = next(filter(None, (info.rebinds(name) for info in infos)), None)
    if floating and rebinds:
        return rebinds
    if not floating:
        return f"it is {noun}, not a float or array"
    site = next((i.branch_sites[name] for i in infos if name in i.branch_sites), None)
    where = f"used in `if` at {site[0]}:{site[1]}" if site else "branched on in Python"
    return f"{name if at else 'it'} is {where} (a traced value could not run there)"
