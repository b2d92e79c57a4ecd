"""`lift.diff` of two skeletons: a pair of nodes met by the walk of `diff`,
compared by their facts and capture by capture, with one policy for what to
say: the key path, then what stands there in one and in the other (a static as
both values and why it is static)."""

from __future__ import annotations

import types
from typing import Any, Final, cast

import numpy as np

from .._base.errors import static_str
from .._compat import treedef_text
from .._holders.closure import PARTIAL, custom_data
from .._holders.trees import is_function_like
from .._lifted.lift import is_lifted
from .._rule.static import DynamicNames, default_dynamic
from .._skeleton.nodes import (
    FunctionNode,
    Ref,
    Static,
    Template,
)
from .._skeleton.skeleton import Skeleton

__all__ = [
    "SHARED",
    "Slot",
    "a_or_an",
    "at_path",
    "diff_node",
    "diff_slots",
    "is_function",
    "join_path",
    "rebuilt",
    "slot_str",
]

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
    """Whether JAX's `==` on static data finds `u` and `v` different, and why
    when the user could not tell from their values: an object compared by
    identity, an `__eq__` that raises or answers with an array (both taken as
    different here)."""
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
    t: type[Any] = type(u)  # pyright: ignore[reportUnknownVariableType]
    if unequal and type(v) is t and by_identity(u) and not is_function(u):
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


class Slot:
    """What stands in one slot of a capture, as the walk of `diff` meets it in
    the capture rebuilt around it (`rebuilt`): a leaf (`int`), a node of the
    graph (`Ref`; a `Lifted` is `Ref(0)`), a static, or `None` for an empty
    closure cell. Not a pytree: the walk takes it whole."""

    __slots__ = ("name", "owner", "skeleton", "slot")

    def __init__(
        self, skeleton: Skeleton, owner: int, name: str, slot: int | Ref | Static | None
    ) -> None:
        self.skeleton = skeleton
        self.owner = owner  # the node holding the capture
        self.name = name  # its variable, or "it"
        self.slot = slot


def rebuilt(
    skeleton: Skeleton, owner: int, name: str, template: Template | None
) -> Any:
    """A capture rebuilt with a `Slot` in each slot (as `treedef_paths` does
    with its markers), for the walk to go on into it as into any pytree."""
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
    """What two nodes of one kind compare besides their parts: `(what it is
    called, what it is compared by, what is shown, why two shown alike
    differ)`."""
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
        for ident, (label, _) in one.items():
            if ident not in other:
                lines.append(f"{path}{label.text}: captured in {side} only")
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
    """Two captures of one name (`(skeleton, holder, template)` each): what to
    say at once, or both rebuilt for the walk to go into."""
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
    """Whether two templates hold the same structure: a single value in both
    (no treedef), or equal treedefs (a treedef's `==` refuses `None`)."""
    if a.treedef is None or b.treedef is None:
        return a.treedef is b.treedef
    return a.treedef == b.treedef


def _shape(template: Template) -> str:
    if template.treedef is None:
        return "a single value"
    # Dicts as the rebuilt value holds them: in insertion order.
    text = treedef_text(
        template.treedef if template.order is None else template.order[0]
    )
    return text if len(text) <= 60 else text[:57] + "..."


def _aux_str(template: Template) -> str:
    """The static data of a template's custom pytree nodes, as it is shown."""
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
    """Two slots at one path: nodes compared once per pair (both graphs walked
    together by what refers to what: a subgraph of another size elsewhere
    shifts nothing), statics by value."""
    u, v, name = x.slot, y.slot, x.name
    if type(u) is Ref and type(v) is Ref:
        key = (id(x.skeleton), u.index, id(y.skeleton), v.index)
        if key not in seen:
            seen.add(key)
            diff_node(path, (x.skeleton, u.index), (y.skeleton, v.index), lines, stack)
    elif type(u) is Static and type(v) is Static:
        if u != v:
            lines.append(
                f"{path}: {name} = {_keyed_str(u)} vs {_keyed_str(v)}, static because "
                f"{_why_static(x.skeleton, name, u)}{_why_apart(u, v)}"
                + _owner(x.skeleton, x.owner)
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
        return f"static {_keyed_str(slot)} ({_why_static(skeleton, x.name, slot)})"
    return "not yet bound (an empty closure cell)"


def _keyed_str(slot: Static) -> str:
    """A static as its `Lifted` was keyed with it: a captured list, dict or set
    kept whole (the user's own object, changed since, perhaps) as it held when
    lifted, read back from its key; any other static as it is."""
    value = slot.value
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if (t is list or t is dict or t is set) and not slot.by_identity:
        try:
            value = _keyed_value(slot.slot_key)
        except (TypeError, ValueError, IndexError, RecursionError):
            pass  # a key of a kind not read back: the value as it is now
    if t is not set or not value:
        return static_str(value, LIMIT)
    text = "{" + ", ".join(sorted(map(static_str, value))) + "}"  # not hash order
    return text if len(text) <= LIMIT else text[: LIMIT - 3] + "..."


def _keyed_value(key: Any) -> Any:
    """The value a static key (`static_key`, or the contents key of a list,
    dict or set kept whole) was made from."""
    t: Any = key[0]
    rest: tuple[Any, ...] = key[1:]
    if t in (list, tuple, set, frozenset):
        return cast("type[Any]", t)(map(_keyed_value, rest[0]))
    if t is dict:
        return {_keyed_value(k): _keyed_value(v) for k, v in rest[0]}
    if t is float or t is complex:
        return t(*map(float.fromhex, rest))
    if type(t) is type and issubclass(t, np.generic):
        return np.frombuffer(rest[1], rest[0])[0]
    if type(rest[-1]) is (key[0] if len(rest) == 1 else rest[0]):
        return rest[-1]  # by value (`(int, 3)`), or by its own `__eq__`
    raise TypeError("not a key lift reads back")


def _why_apart(u: Static, v: Static) -> str:
    """`; why` two statics differ when their values cannot tell: a dict's keys
    in another order, an `__eq__` that cannot answer."""
    a, b = u.value, v.value
    if type(a) is dict and type(b) is dict:
        ka: list[Any] = list(cast("dict[Any, Any]", a))
        kb: list[Any] = list(cast("dict[Any, Any]", b))
        if ka != kb and len(ka) == len(kb) and set(ka) == set(kb):
            return f"; {_REORDERED}"
    why = "" if by_identity(a) else static_unequal(a, b)[1]  # else `_why_static`'s
    return f"; {why}" if why else ""


def _why_static(skeleton: Skeleton, name: str, slot: Static) -> str:
    """Why a captured value is static, as the user can act on it."""
    value = slot.value
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    names, dynamic = skeleton.options or (frozenset[str](), None)
    if slot.by_identity:
        return (
            f"it is {a_or_an(t.__name__)}, not a float or array, and unhashable: "
            "compared by identity, so each new object compiles anew"
        )
    if name in names:
        return f"you declared it static (static=({name!r},))"
    if isinstance(dynamic, DynamicNames):
        return f"it is not named in `dynamic=` ({dynamic!r})"
    if dynamic is not None:
        return "your `dynamic=` predicate left it static"
    if t in (float, complex) or default_dynamic(value):
        infos = [n.info for n in skeleton.nodes if isinstance(n, FunctionNode)]
        if any(name in i.rebound for i in infos):
            return f"the code rebinds it (`nonlocal {name}`), which a leaf could not follow"
        sites = (i.branch_sites.get(name) for i in infos)
        site = next((s for s in sites if s is not None), None)
        if site is not None:
            return (
                f"it is used in `if` at {site[0]}:{site[1]} (a traced value could "
                f"not run there)"
            )
        return "code branches on it in Python (a traced value could not run there)"
    if by_identity(value) and not issubclass(t, (type, types.ModuleType)):
        return (
            f"it is {a_or_an(t.__name__)}, not a float or array, with no `__eq__` of "
            f"its own: compared by identity, so each new object compiles anew"
        )
    return f"it is {a_or_an(t.__name__)}, not a float or array"
