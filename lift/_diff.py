# pyright: reportPrivateUsage=false
"""`lift.diff`: why two pytrees would compile separately, in the user's terms."""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Callable
from typing import Any, Final, cast

import jax
import numpy as np

from . import _trees as jtu
from ._errors import static_str
from ._lift import flatten_lifted, is_lifted, stops_flattening
from ._lifted import Lifted
from ._nodes import (
    CellNode,
    FunctionNode,
    HolderNode,
    MethodNode,
    PartialNode,
    Ref,
    Static,
    Template,
)
from ._skeleton import Skeleton
from ._static import default_dynamic
from ._trees import treedef_paths

__all__ = ["diff"]


def diff(a: Any, b: Any) -> str | None:
    """Why `a` and `b` would compile separately, or `None` when they would not.

    Compares the treedefs of two pytrees (two `Lifted`, two optimizers, two
    training states...): the part of `jax.jit`'s cache key that is not the
    leaves' shapes and dtypes. Each difference is one line: the key path
    `jax.tree_util.keystr` prints for it (`.update.captures['b2']`), the
    variable, both values, and why the value is static (an `int`; declared with
    `static=`; used in an `if` at `file:line`). A function or `Lifted` held in a
    pytree's static metadata (a dataclass field that is not a pytree field) is
    named, with the fix: it compiles anew for every new object. So is each
    leaf whose shape, dtype or weak type differs (`optax.adam(0.1)`'s weakly
    typed learning rate against `optax.adam(np.float32(0.2))`'s), and a dict
    captured with the same keys in another order (lift keeps insertion order).
    This is the answer to "why did this retrace?": `None` exactly when one
    `jax.jit` program serves both.

    ```python
    import lift

    def make(lr, steps):
        return lift.lift(lambda x: x * lr / steps)

    assert lift.diff(make(0.1, 10), make(0.2, 10)) is None  # lr is dynamic
    print(lift.diff(make(0.1, 10), make(0.1, 20)))
    ```

    ```text
    .captures['steps']: steps = 10 vs 20, static because it is an int, not a float or array (in make.<locals>.<lambda> at ...)
    ```

    **Arguments:**

    - `a`, `b`: any two pytrees, `Lifted` or holding them.

    **Returns:** a description with one line per difference, or `None` when the
    treedefs and the leaves' types are equal.
    """
    flatten_lifted(a, "diff")  # refuses containers JAX cannot flatten, by name
    flatten_lifted(b, "diff")
    la, ta = jtu.tree_flatten_with_path(a, is_leaf=_iterator)
    lb, tb = jtu.tree_flatten_with_path(b, is_leaf=_iterator)
    lines: list[str] = []
    if not _same(ta, tb):
        _diff_trees(a, b, lines)
        if not lines:  # not expected: say what JAX compares
            lines.append(f"the pytree structures differ: {ta} != {tb}")
    if len(la) == len(lb):
        _diff_leaves(la, lb, lines)
    return "\n".join(lines) if lines else None


def _diff_leaves(
    la: list[tuple[Any, Any]], lb: list[tuple[Any, Any]], lines: list[str]
) -> None:
    """Leaves `jax.jit` would trace anew for: another shape, dtype or weak type
    (a Python float is weakly typed, `np.float32(0.2)` is not)."""
    for (path, x), (_, y) in zip(la, lb, strict=True):
        kx, ky = _leaf_type(x), _leaf_type(y)
        if kx != ky:
            lines.append(
                f"{_at(jtu.keystr(path))}a leaf of type {kx} in one, {ky} in the "
                "other (jax.jit compiles a program per leaf shape, dtype and weak "
                "type)"
            )


def _leaf_type(x: Any) -> str:
    """What `jax.jit` keys a leaf on, as `jax.typeof` prints it (`~` marks a
    weak type)."""
    try:
        aval: Any = jax.typeof(x)
    except Exception:  # not a JAX value (`2**100`, an object): jit refuses it
        return type(x).__name__
    if not hasattr(aval, "str_short"):
        return str(aval)
    weak = "~" if getattr(aval, "weak_type", False) else ""
    return weak + aval.str_short(short_dtypes=True)


# -- pytrees ------------------------------------------------------------------------


def _same(ta: jtu.TreeDef, tb: jtu.TreeDef) -> bool:
    """`ta == tb`, false when JAX cannot compare them (static metadata whose
    `__eq__` raises or answers with an array: `jax.jit` cannot reuse a program
    for it either)."""
    try:
        return ta == tb
    except Exception:
        return False


def _iterator(x: Any) -> bool:
    """A stateful iterator: a leaf, as lift's own flattening takes it."""
    return stops_flattening(x) and not is_lifted(x)


def _one_level(x: Any) -> jtu.TreeDef:
    return jtu.tree_structure(x, is_leaf=jtu.one_level(x))


def _diff_trees(a: Any, b: Any, lines: list[str]) -> None:
    """Walk `a` and `b` together (iteratively), reporting where their treedefs
    part: node types, static metadata, number of children, and `Lifted`."""
    stack: list[tuple[str, Any, Any]] = [("", a, b)]
    while stack:
        path, x, y = stack.pop()
        if is_lifted(x) and is_lifted(y):
            _diff_lifted(path, x, y, lines)
            continue
        if is_lifted(x) or is_lifted(y) or stops_flattening(x) or stops_flattening(y):
            if _what(x) != _what(y) or type(x) is not type(y):
                lines.append(f"{_at(path)}{_what(x)} in one, {_what(y)} in the other")
            continue
        sx, sy = _one_level(x), _one_level(y)
        same = _same(sx, sy)
        if same and jtu.treedef_is_leaf(sx):
            continue
        dx, dy = sx.node_data(), sy.node_data()
        if dx is None or dy is None or dx[0] is not dy[0]:
            lines.append(f"{_at(path)}{_what(x)} in one, {_what(y)} in the other")
            continue
        if not same:
            _diff_metadata(path, x, y, dx[1], dy[1], lines)
            if sx.num_leaves != sy.num_leaves:
                continue
        cx = _children(x)
        cy = _children(y)
        if [k for k, _ in cx] != [k for k, _ in cy]:
            continue  # other keys or fields: said by `_diff_metadata`
        for (kx, vx), (_, vy) in reversed(list(zip(cx, cy, strict=True))):
            stack.append((_join(path, jtu.keystr(kx)), vx, vy))


def _children(x: Any) -> list[tuple[Any, Any]]:
    """`x`'s children with their key paths (one level)."""
    return jtu.tree_flatten_with_path(x, is_leaf=jtu.one_level(x))[0]


def _what(x: Any) -> str:
    """A value as a diff names it: `a list of 3`, `a Lifted (f)`, `float32[3]`."""
    # Through the type only where it can: `x` may be any object, even one whose
    # attributes raise.
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    if issubclass(t, Lifted):
        return f"a {t.__name__} ({x.__qualname__})"
    if x is None:
        return "None"
    if issubclass(t, (list, tuple, dict)):
        n = len(cast("list[Any]", x))
        return f"a {t.__name__} of {n}"
    try:
        shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
        if type(shape) is tuple and dtype is not None:
            return (
                f"{dtype}[{','.join(str(d) for d in cast('tuple[Any, ...]', shape))}]"
            )
    except Exception:
        pass
    return _a(t.__name__)


_FIX: Final = (
    "Fix: make `{field}` a pytree field (flax: `struct.field(pytree_node=True)`, "
    "or `nnx.data()`; `lift.flax.TrainState` and `lift.flax.Optimizer` do; "
    "equinox: drop `static=True`), or pass the {kind} to the jitted function as "
    "an argument."
)


def _diff_metadata(
    path: str, x: Any, y: Any, mx: Any, my: Any, lines: list[str]
) -> None:
    """Two nodes of one type whose static metadata (pytree aux data) differ."""
    hx, hy = _functions_in(mx), _functions_in(my)
    # The fields whose functions differ (by `==`, as JAX compares them), in
    # order, with the functions' names and why they differ when `==` could not say.
    fields: dict[str | None, list[str]] = {}
    reasons: list[str] = []
    for fx, fy in zip(hx, hy, strict=False):
        unequal, why = _unequal(fx, fy)
        if unequal:
            field = _field_of(x, fx) or _field_of(y, fy)
            fields.setdefault(field, []).append(_fn_name(fx))
            if why:
                reasons.append(why)
            if type(fx) is types.MethodType:
                reasons.append(
                    "a bound method is equal to one of the same function bound to "
                    "the same object"
                )
    for field, names in fields.items():
        held = getattr(x, field, None) if field else None
        kind = (
            "optimizer"
            if hasattr(held, "init") and hasattr(held, "update")
            else ("function")
        )
        where = f"{path}.{field}" if field else path
        what = names[0] if len(names) == 1 else f"{', '.join(names)}"
        lines.append(
            f"{_at(where)}{what} {'is' if len(names) == 1 else 'are'} held in the "
            f"static metadata of {type(x).__name__} "
            f"({'field ' + repr(field) if field else 'a field that'} is not a pytree "
            "field), which JAX compares with `==`: a function is equal only to "
            "itself, so every new one compiles anew, whatever it captures"
            + "".join(f"; {why}" for why in dict.fromkeys(reasons))
            + ".\n"
            + _FIX.format(field=field or "it", kind=kind)
        )
    if fields:
        return
    if len(hx) != len(hy):
        lines.append(
            f"{_at(path)}{type(x).__name__}'s static metadata holds {len(hx)} "
            f"function(s) in one, {len(hy)} in the other"
        )
        return
    if isinstance(x, dict) and isinstance(y, dict):
        kx = set(cast("dict[Any, Any]", x))
        ky = set(cast("dict[Any, Any]", y))
        only = [
            f"{_keys(sorted(map(repr, keys)))} in {side} only"
            for keys, side in ((kx - ky, "one"), (ky - kx, "the other"))
            if keys
        ]
        if not only:  # equal keys of other types (`1` and `1.0`)
            only = [f"keys equal by `==` but of other types ({_what(x)})"]
        lines.append(f"{_at(path)}the dicts' keys differ: {', '.join(only)}")
        return
    if isinstance(x, (list, tuple)) and len(cast("list[Any]", x)) != len(
        cast("list[Any]", y)
    ):
        lines.append(f"{_at(path)}{_what(x)} in one, {_what(y)} in the other")
        return
    lines.append(
        f"{_at(path)}{_type_name(x)}'s static metadata differs: "
        f"{static_str(mx)} vs {static_str(my)}"
        + "".join(
            f"; {why}"
            for why in dict.fromkeys(
                why
                for u, v in zip(_atoms(mx), _atoms(my), strict=False)
                for unequal, why in [_unequal(u, v)]
                if unequal and why
            )
        )
    )


def _keys(reprs: list[str]) -> str:
    """`the key 'a' is`, `the keys 'a', 'b' are`."""
    if len(reprs) == 1:
        return f"the key {reprs[0]} is"
    return f"the keys {', '.join(reprs)} are"


def _by_identity(t: type[Any]) -> bool:
    """Whether `==` on instances of `t` is identity: no `__eq__` of its own."""
    return getattr(t, "__eq__", None) is object.__eq__


def _unequal(u: Any, v: Any) -> tuple[bool, str]:
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
                f"{_a(t.__name__)}'s `==` answers with an array, not True or False: "
                "taken as different"
            )
        else:
            unequal = not bool(eq)
    except Exception as err:
        return True, (
            f"comparing {_a(t.__name__)} with `==` raised {type(err).__name__}: "
            "taken as different"
        )
    if unequal and type(v) is t and _by_identity(t) and not _is_function(u):
        return True, (
            f"{_a(t.__name__)} has no `__eq__` of its own: compared by identity, "
            "so each new one compiles anew"
        )
    return unequal, ""


def _is_function(v: Any) -> bool:
    t: type[Any] = type(v)  # pyright: ignore[reportUnknownVariableType]
    return issubclass(t, Lifted) or t in (
        types.FunctionType,
        types.MethodType,
        functools.partial,
    )


_SCAN_LIMIT: Final = 10_000


def _type_name(x: Any) -> str:
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    return t.__name__


# A path longer than this (functions nested thousands deep) keeps its start and
# end around ` ... `: each step then costs the same, however deep the walk.
_PATH_CHARS: Final = 1000


def _join(path: str, more: str) -> str:
    path += more
    if len(path) > _PATH_CHARS:
        path = f"{path[:300]} ... {path[-(_PATH_CHARS - 305) :]}"
    return path


def _at(path: str) -> str:
    """`path: ` before a message, nothing at the top of the tree."""
    return f"{path}: " if path else ""


def _functions_in(data: Any) -> list[Any]:
    """The functions (`Lifted` included) held in static metadata, in order."""
    return [v for v in _atoms(data) if _is_function(v)]


def _atoms(data: Any) -> list[Any]:
    """What static metadata holds, in order, through tuples, lists, sets and dicts
    (their values) and NamedTuples."""
    found: list[Any] = []
    stack = [data]
    seen = 0
    while stack and seen < _SCAN_LIMIT:
        v = stack.pop()
        seen += 1
        t: type[Any] = type(v)  # pyright: ignore[reportUnknownVariableType]
        if _is_function(v):
            found.append(v)
        elif t in (tuple, list, frozenset, set) or issubclass(t, tuple):
            stack.extend(reversed(list(cast("tuple[Any, ...]", v))))
        elif t is dict:
            stack.extend(reversed(list(cast("dict[Any, Any]", v).values())))
        elif type(getattr(v, "_fields", None)) is tuple:  # a NamedTuple of functions
            stack.extend(reversed(list(v)))
        else:
            found.append(v)
    return found


def _field_of(x: Any, value: Any) -> str | None:
    """The attribute of `x` that holds `value` (directly or in a container)."""
    if dataclasses.is_dataclass(x):
        names = [f.name for f in dataclasses.fields(x)]
    else:
        names = list(getattr(x, "__dict__", {}))
    for name in names:
        try:
            held = getattr(x, name)
        except Exception:
            continue
        if held is value or any(f is value for f in _functions_in(held)):
            return name
    return None


def _fn_name(fn: Any) -> str:
    if is_lifted(fn):
        return f"a {type(fn).__name__} ({fn.__qualname__})"
    return f"the function {getattr(fn, '__qualname__', type(fn).__name__)}"


# -- lifted functions ---------------------------------------------------------------


class _Side:
    """One of the two skeletons being compared, and how it was lifted."""

    __slots__ = ("dynamic", "names", "skeleton")

    def __init__(self, skeleton: Skeleton) -> None:
        self.skeleton = skeleton
        names, dynamic = skeleton.options or (frozenset[str](), None)
        self.names: frozenset[str] = names
        self.dynamic: Callable[[Any], bool] | None = dynamic


def _diff_lifted(
    prefix: str, x: Lifted[Any, Any], y: Lifted[Any, Any], lines: list[str]
) -> None:
    if type(x) is not type(y):
        lines.append(
            f"{_at(prefix)}a {type(x).__qualname__} in one, a {type(y).__qualname__} in "
            "the other"
        )
        return
    sa, sb = _Side(x._skeleton), _Side(y._skeleton)
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
            f"{_at(prefix)}the same functions and values, shared differently (one "
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
            f"{_at(path)}a {na.kind} ({_node_name(sa.skeleton, ia)}) in one, a "
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
                f"{_at(path)}{na.qualname} reads another module's globals (the module "
                "was loaded twice)"
            )
        if (na.name, na.qualname) != (nb.name, nb.qualname):
            lines.append(f"{_at(path)}renamed, {na.qualname!r} vs {nb.qualname!r}")
        if na.meta != nb.meta:
            lines.append(
                f"{_at(path)}{na.qualname}'s docstring, module or annotations differ"
            )
        if (na.has_defaults, na.has_kwdefaults) != (nb.has_defaults, nb.has_kwdefaults):
            lines.append(f"{_at(path)}{na.qualname} has defaults in one only")
    elif isinstance(na, HolderNode):
        assert isinstance(nb, HolderNode)
        if Static(na.static) != Static(nb.static):
            lines.append(f"{_at(path)}{na.holder.name} options differ")
    pa, pb = _parts(sa.skeleton, ia), _parts(sb.skeleton, ib)
    for ident in pa.keys() - pb.keys():
        lines.append(f"{path}{pa[ident][0].text}: captured in one only")
    for ident in pb.keys() - pa.keys():
        lines.append(f"{path}{pb[ident][0].text}: captured in one only")
    for ident, (label, ta) in pa.items():
        if ident not in pb:
            continue
        tb = pb[ident][1]
        where = _join(path, label.text)
        if ta is None or tb is None:
            if (ta is None) != (tb is None):
                lines.append(
                    f"{where}: {label.variable} is not yet bound in one (an empty "
                    "closure cell)"
                )
            continue
        _diff_template(where, label.variable, sa, sb, ta, tb, lines, stack)
    if list(pa) != list(pb) and pa.keys() == pb.keys():
        lines.append(f"{_at(path)}the same captures, in another order")


def _shape(template: Template) -> str:
    if template.treedef is None:
        return "a single value"
    # Dicts as the rebuilt value holds them: in insertion order.
    text = str(template.treedef if template.order is None else template.order[0])
    text = text.removeprefix("PyTreeDef(").removesuffix(")")
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
            _, why = _unequal(su.value, sv.value)  # an `__eq__` that cannot say
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
            return text if len(text) <= _LIMIT else text[: _LIMIT - 3] + "..."
    return static_str(value)


_LIMIT: Final = 80  # as `static_str` cuts a value


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


def _a(noun: str) -> str:
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
            f"it is {_a(type(value).__name__)}, not a float or array, and unhashable: "
            "compared by identity, so each new object compiles anew"
        )
    if name in side.names:
        return f"you declared it static (static=({name!r},))"
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
            f"it is {_a(t.__name__)}, not a float or array, with no `__eq__` of its "
            "own: compared by identity, so each new object compiles anew"
        )
    return f"it is {_a(t.__name__)}, not a float or array"


def _branch_site(skeleton: Skeleton, name: str) -> str | None:
    """`file:line` where a function of the graph branches in Python on `name`."""
    for node in skeleton.nodes:
        if isinstance(node, FunctionNode):
            site = node.info.branch_sites.get(name)
            if site is not None:
                return f"{site[0]}:{site[1]}"
    return None
