"""`lift.diff` of two `Lifted`: where their skeletons differ, node by node and
capture by capture, in the user's terms (the variable, its path, the two values,
and why a value is static)."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any, Final, cast

import numpy as np

from .._base.errors import static_str
from .._capture.lifted import Lifted
from .._capture.nodes import (
    CellNode,
    FunctionNode,
    HolderNode,
    MethodNode,
    PartialNode,
    Ref,
    Static,
    Template,
)
from .._capture.skeleton import Skeleton, skeleton_of
from .._capture.static import DynamicNames, default_dynamic
from .._compat import treedef_text
from .._holders.closure import custom_data
from .._holders.trees import treedef_paths

__all__ = ["diff_lifted"]

# A path longer than this (functions nested thousands deep) keeps its start and
# end around ` ... `: each step then costs the same, however deep the walk.
PATH_CHARS: Final = 1000
LIMIT: Final = 80  # as `static_str` cuts a value


def _by_identity(t: type[Any]) -> bool:
    """Whether `==` on instances of `t` is identity: no `__eq__` of its own."""
    return getattr(t, "__eq__", None) is object.__eq__


def static_unequal(u: Any, v: Any) -> tuple[bool, str]:
    """Whether JAX's `==` on static data finds `u` and `v` different, and why
    when the user could not tell from their values: an object compared by
    identity, an `__eq__` that raises or answers with an array (both taken as
    different here)."""
    if u is v:
        return False, ""
    t: type[Any] = type(u)  # pyright: ignore[reportUnknownVariableType]
    try:
        eq = u == v
        if type(eq) is bool:
            unequal = not eq
        elif getattr(eq, "shape", None) not in (None, ()):
            return True, (
                f"{a_or_an(t.__name__)}'s `==` answers with an array, not True or False: "
                "taken as different"
            )
        else:
            unequal = not bool(eq)
    except Exception as err:
        return True, (
            f"comparing {a_or_an(t.__name__)} with `==` raised {type(err).__name__}: "
            "taken as different"
        )
    if unequal and type(v) is t and _by_identity(t) and not is_function(u):
        return True, (
            f"{a_or_an(t.__name__)} has no `__eq__` of its own: compared by identity, "
            "so each new one compiles anew"
        )
    return unequal, ""


def is_function(v: Any) -> bool:
    t: type[Any] = type(v)  # pyright: ignore[reportUnknownVariableType]
    return issubclass(t, Lifted) or t in (
        types.FunctionType,
        types.MethodType,
        functools.partial,
    )


def join_path(path: str, more: str) -> str:
    path += more
    if len(path) > PATH_CHARS:
        path = f"{path[:300]} ... {path[-(PATH_CHARS - 305) :]}"
    return path


def at_path(path: str) -> str:
    """`path: ` before a message, nothing at the top of the tree."""
    return f"{path}: " if path else ""


class _Side:
    """One of the two skeletons being compared, and how it was lifted."""

    __slots__ = ("dynamic", "names", "skeleton")

    def __init__(self, skeleton: Skeleton) -> None:
        self.skeleton = skeleton
        names, dynamic = skeleton.options or (frozenset[str](), None)
        self.names: frozenset[str] = names
        self.dynamic: Callable[[Any], bool] | DynamicNames | None = dynamic


def diff_lifted(
    prefix: str, x: Lifted[Any, Any], y: Lifted[Any, Any], lines: list[str]
) -> None:
    if type(x) is not type(y):
        lines.append(
            f"{at_path(prefix)}a {type(x).__qualname__} in one, a {type(y).__qualname__} in "
            "the other"
        )
        return
    sa, sb = _Side(skeleton_of(x)), _Side(skeleton_of(y))
    if sa.skeleton == sb.skeleton:
        return
    before = len(lines)
    # Both graphs walked together from their roots, by what refers to what: a
    # subgraph of another size elsewhere does not shift what is compared.
    stack: list[tuple[str, int, int]] = [(prefix, 0, 0)]
    seen: set[tuple[int, int]] = set()
    while stack:
        path, ia, ib = stack.pop()
        if (ia, ib) in seen:
            continue
        seen.add((ia, ib))
        _diff_node(path, sa, sb, ia, ib, lines, stack)
    if len(lines) == before:
        lines.append(
            f"{at_path(prefix)}the same functions and values, shared differently (one "
            "object captured in two places in one, two equal objects in the other)"
        )


def _node_name(skeleton: Skeleton, index: int) -> str:
    """A node as people know it: `qualname (file:line)`, `functools.partial(f)`."""
    node = skeleton.nodes[index]
    if isinstance(node, FunctionNode):
        code = node.info.code
        return f"{node.qualname} ({code.co_filename}:{code.co_firstlineno})"
    if isinstance(node, CellNode):
        return _node_name(skeleton, node.owner)
    inner = _ref_name(skeleton, node.func)
    if isinstance(node, PartialNode):
        return f"functools.partial({inner})"
    if isinstance(node, MethodNode):
        return f"bound method ({inner})"
    return f"{node.holder.name}({inner})"


def _ref_name(skeleton: Skeleton, template: Template) -> str:
    slots = template.slots
    if len(slots) == 1 and type(slots[0]) is Ref:
        node = skeleton.nodes[slots[0].index]
        if isinstance(node, FunctionNode):
            return node.qualname
    return "..."


def _owner(skeleton: Skeleton, template: Template) -> str:
    node = skeleton.nodes[skeleton.function_of(template)]
    if isinstance(node, FunctionNode):
        code = node.info.code
        return f"{node.qualname} at {code.co_filename}:{code.co_firstlineno}"
    return node.kind


def _parts(skeleton: Skeleton, index: int) -> dict[Any, tuple[Any, Template | None]]:
    """A node's parts by what they are called, a function's cells included."""
    node = skeleton.nodes[index]
    out: dict[Any, tuple[Any, Template | None]] = {}
    if isinstance(node, FunctionNode):
        for c in node.cells:
            cell = cast(CellNode, skeleton.nodes[c])
            out[cell.label.ident] = (cell.label, cell.template)
    for label, template in node.parts():
        out[label.ident] = (label, template)
    return out


def _diff_node(
    path: str,
    sa: _Side,
    sb: _Side,
    ia: int,
    ib: int,
    lines: list[str],
    stack: list[tuple[str, int, int]],
) -> None:
    na, nb = sa.skeleton.nodes[ia], sb.skeleton.nodes[ib]
    if type(na) is not type(nb):
        lines.append(
            f"{at_path(path)}a {na.kind} ({_node_name(sa.skeleton, ia)}) in one, a "
            f"{nb.kind} ({_node_name(sb.skeleton, ib)}) in the other"
        )
        return
    if isinstance(na, FunctionNode):
        assert isinstance(nb, FunctionNode)
        ca, cb = na.info.code, nb.info.code
        if ca is not cb and (na.info.hash != nb.info.hash or ca != cb):
            same = (ca.co_filename, ca.co_firstlineno, na.qualname) == (
                cb.co_filename,
                cb.co_firstlineno,
                nb.qualname,
            )
            lines.append(
                f"{path + ' is a' if path else 'two'} different function"
                f"{'' if path else 's'}: {_node_name(sa.skeleton, ia)} vs "
                f"{_node_name(sb.skeleton, ib)}"
                + (" (same name and line, different code)" if same else "")
            )
            return
        if na.globals is not nb.globals:
            lines.append(
                f"{at_path(path)}{na.qualname} reads another module's globals (the module "
                "was loaded twice)"
            )
        if (na.name, na.qualname) != (nb.name, nb.qualname):
            lines.append(f"{at_path(path)}renamed, {na.qualname!r} vs {nb.qualname!r}")
        if na.meta != nb.meta:
            lines.append(
                f"{at_path(path)}{na.qualname}'s docstring, module or annotations differ"
            )
        if (na.has_defaults, na.has_kwdefaults) != (nb.has_defaults, nb.has_kwdefaults):
            lines.append(f"{at_path(path)}{na.qualname} has defaults in one only")
    elif isinstance(na, HolderNode):
        assert isinstance(nb, HolderNode)
        if Static(na.static) != Static(nb.static):
            lines.append(f"{at_path(path)}{na.holder.name} options differ")
    pa, pb = _parts(sa.skeleton, ia), _parts(sb.skeleton, ib)
    for ident in pa.keys() - pb.keys():
        lines.append(f"{path}{pa[ident][0].text}: captured in one only")
    for ident in pb.keys() - pa.keys():
        lines.append(f"{path}{pb[ident][0].text}: captured in one only")
    for ident, (label, ta) in pa.items():
        if ident not in pb:
            continue
        tb = pb[ident][1]
        where = join_path(path, label.text)
        if ta is None or tb is None:
            if (ta is None) != (tb is None):
                lines.append(
                    f"{where}: {label.variable} is not yet bound in one (an empty "
                    "closure cell)"
                )
            continue
        _diff_template(where, label.variable, sa, sb, ta, tb, lines, stack)
    if list(pa) != list(pb) and pa.keys() == pb.keys():
        lines.append(f"{at_path(path)}the same captures, in another order")


def _shape(template: Template) -> str:
    if template.treedef is None:
        return "a single value"
    # Dicts as the rebuilt value holds them: in insertion order.
    text = treedef_text(
        template.treedef if template.order is None else template.order[0]
    )
    return text if len(text) <= 60 else text[:57] + "..."


def _diff_template(
    where: str,
    variable: str | None,
    sa: _Side,
    sb: _Side,
    ta: Template,
    tb: Template,
    lines: list[str],
    stack: list[tuple[str, int, int]],
) -> None:
    if ta.treedef != tb.treedef or ta.order != tb.order:
        lines.append(
            f"{where}: {variable or 'it'} holds {_shape(ta)} in one, {_shape(tb)} in "
            "the other"
            + (
                " (the same keys in another order: lift keeps a dict's insertion "
                "order, as Python iterates it, so each order is its own program)"
                if ta.treedef == tb.treedef
                else ""
            )
        )
        return
    if ta.aux != tb.aux:
        # Equal treedefs whose static data differs as statics do (`0.0` and
        # `-0.0`, `1` and `True`), which JAX's `==` does not see.
        lines.append(
            f"{where}: {variable or 'it'} holds {_shape(ta)} in both, whose "
            f"static (aux) data differs: {_aux_str(ta)} vs {_aux_str(tb)} "
            f"(in {_owner(sa.skeleton, ta)})"
        )
        return
    name = variable or "it"
    subpaths = treedef_paths(ta.treedef) if ta.treedef is not None else None
    for pos, (u, v) in enumerate(zip(ta.slots, tb.slots, strict=True)):
        sub = where
        if subpaths is not None:
            sub += "".join(str(e) for e in subpaths[pos])
        tu, tv = type(u), type(v)
        if tu is int and tv is int:
            continue
        if tu is Ref and tv is Ref:
            stack.append((sub, cast(Ref, u).index, cast(Ref, v).index))
            continue
        if tu is Static and tv is Static:
            if u == v:
                continue
            su, sv = cast(Static, u), cast(Static, v)
            _, why = static_unequal(su.value, sv.value)  # an `__eq__` that cannot say
            if _by_identity(type(su.value)):  # pyright: ignore[reportUnknownArgumentType]
                why = ""  # said by `_why_static`
            if _reordered(su.value, sv.value):
                why = (
                    "the same keys in another order: lift keeps a dict's insertion "
                    "order, as Python iterates it, so each order is its own program"
                )
            lines.append(
                f"{sub}: {name} = {_keyed_str(su)} vs {_keyed_str(sv)}, "
                f"static because {_why_static(sa, ta, name, su)}"
                + (f"; {why}" if why else "")
                + f" (in {_owner(sa.skeleton, ta)})"
            )
            continue
        lines.append(
            f"{sub}: {name} is {_slot_str(sa, ta, name, u)} in one, "
            f"{_slot_str(sb, tb, name, v)} in the other (in {_owner(sa.skeleton, ta)})"
        )


def _aux_str(template: Template) -> str:
    """The static data of a template's custom pytree nodes, as it is shown."""
    parts = [aux for _, aux in custom_data(template.treedef) if aux is not None]
    text = ", ".join(static_str(p) for p in parts)
    return text if len(parts) == 1 else f"({text})"


def _slot_str(side: _Side, template: Template, name: str, slot: Any) -> str:
    if type(slot) is int:
        return "a leaf (dynamic)"
    if type(slot) is Ref:
        return f"a {side.skeleton.nodes[slot.index].kind} ({_node_name(side.skeleton, slot.index)})"
    static = cast(Static, slot)
    return f"static {_keyed_str(static)} ({_why_static(side, template, name, static)})"


def _keyed_str(slot: Static) -> str:
    """A static as its `Lifted` was keyed with it: a captured list, dict or set
    kept whole (the user's own object, changed since, perhaps) as it held when
    lifted, read back from its key; any other static as it is."""
    value = slot.value
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if (t is list or t is dict or t is set) and not slot.by_identity:
        try:
            text = _key_str(slot.slot_key)
        except _Unreadable:
            pass
        else:
            return text if len(text) <= LIMIT else text[: LIMIT - 3] + "..."
    return static_str(value)


class _Unreadable(Exception):
    """A static key `_key_str` cannot read back."""


def _key_str(key: Any) -> str:
    """The text of the value a static key (`static_key`, or the contents key of
    a list, dict or set kept whole) was made from, nested items included; read
    iteratively (an explicit stack of pending texts)."""
    out: list[str] = []
    # Items are a key to read, or a literal text to emit.
    stack: list[tuple[bool, Any]] = [(True, key)]
    while stack:
        is_key, item = stack.pop()
        if not is_key:
            out.append(item)
            continue
        if type(item) is not tuple or not item:
            raise _Unreadable
        item = cast("tuple[Any, ...]", item)
        t: Any = item[0]
        parts: list[tuple[bool, Any]]
        if t is list or t is tuple:
            items = list(item[1])
            close = "," if t is tuple and len(items) == 1 else ""
            parts = _joined(
                items, "[" if t is list else "(", close + ("]" if t is list else ")")
            )
        elif t is set or t is frozenset:
            items = sorted(item[1], key=repr)
            if not items:
                parts = [(False, "set()" if t is set else "frozenset()")]
            else:
                parts = _joined(
                    items, "{" if t is set else "frozenset({", "}" if t is set else "})"
                )
        elif t is dict:
            parts = [(False, "{")]
            for i, (k, v) in enumerate(item[1]):
                if i:
                    parts.append((False, ", "))
                parts += [(True, k), (False, ": "), (True, v)]
            parts.append((False, "}"))
        elif t is float and len(item) == 2:
            parts = [(False, repr(float.fromhex(item[1])))]
        elif t is complex and len(item) == 3:
            parts = [
                (False, repr(complex(float.fromhex(item[1]), float.fromhex(item[2]))))
            ]
        elif type(t) is type and len(item) == 2 and isinstance(item[1], t):
            parts = [(False, static_str(item[1]))]
        elif type(t) is type and len(item) == 3 and isinstance(item[2], item[1]):
            parts = [(False, static_str(item[2]))]  # compared by its own `__eq__`
        elif type(t) is type and issubclass(t, np.generic) and len(item) == 3:
            parts = [(False, static_str(np.frombuffer(item[2], item[1])[0]))]
        else:
            raise _Unreadable
        stack.extend(reversed(parts))
    return "".join(out)


def _joined(items: list[Any], open_: str, close: str) -> list[tuple[bool, Any]]:
    parts: list[tuple[bool, Any]] = [(False, open_)]
    for i, k in enumerate(items):
        if i:
            parts.append((False, ", "))
        parts.append((True, k))
    parts.append((False, close))
    return parts


def a_or_an(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _reordered(a: Any, b: Any) -> bool:
    """Whether `a` and `b` are dicts with the same items in another order."""
    if type(a) is not dict or type(b) is not dict:
        return False
    ka, kb = list(cast("dict[Any, Any]", a)), list(cast("dict[Any, Any]", b))
    return ka != kb and len(ka) == len(kb) and set(ka) == set(kb)


def _why_static(side: _Side, template: Template, name: str, slot: Static) -> str:
    """Why a captured value is static, as the user can act on it."""
    value = slot.value
    if slot.by_identity:
        return (
            f"it is {a_or_an(type(value).__name__)}, not a float or array, and unhashable: "
            "compared by identity, so each new object compiles anew"
        )
    if name in side.names:
        return f"you declared it static (static=({name!r},))"
    if isinstance(side.dynamic, DynamicNames):
        return f"it is not named in `dynamic=` ({side.dynamic!r})"
    if side.dynamic is not None:
        return "your `dynamic=` predicate left it static"
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if t in (float, complex) or default_dynamic(value):
        site = _branch_site(side.skeleton, name)
        if site is not None:
            return f"it is used in `if` at {site} (a traced value could not run there)"
        return "code branches on it in Python (a traced value could not run there)"
    if _by_identity(t) and not issubclass(t, (type, types.ModuleType)):
        return (
            f"it is {a_or_an(t.__name__)}, not a float or array, with no `__eq__` of its "
            "own: compared by identity, so each new object compiles anew"
        )
    return f"it is {a_or_an(t.__name__)}, not a float or array"


def _branch_site(skeleton: Skeleton, name: str) -> str | None:
    """`file:line` where a function of the graph branches in Python on `name`."""
    for node in skeleton.nodes:
        if isinstance(node, FunctionNode):
            site = node.info.branch_sites.get(name)
            if site is not None:
                return f"{site[0]}:{site[1]}"
    return None
