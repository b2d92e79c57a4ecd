# pyright: reportPrivateUsage=false
"""`lift.diff`: why two lifted objects would compile separately."""

from __future__ import annotations

from typing import Any

from . import _trees as jtu
from ._lift import flatten_lifted, is_lifted, stops_flattening
from ._lifted import Lifted
from ._paths import node_path, treedef_paths
from ._skeleton import (
    CellNode,
    FunctionNode,
    MethodNode,
    PartialNode,
    Skeleton,
    Static,
    Template,
)

__all__ = ["diff"]


def diff(a: Any, b: Any) -> str | None:
    """Why `a` and `b` would compile separately, or `None` when they would not.

    Compares the treedefs of two `Lifted` (or of two pytrees holding them), the
    part of `jax.jit`'s cache key that lift decides: code and static captures.
    Each difference is reported on its own line, by key path, captured variable
    and values. This is the answer to "why did this retrace?" (leaves of other
    shapes or dtypes retrace too, as any `jax.jit` argument does; compare
    `jax.typeof` of the leaves for those).

    ```python
    import lift

    def make(lr, steps):
        return lift.lift(lambda x: x * lr / steps)

    assert lift.diff(make(0.1, 10), make(0.2, 10)) is None  # lr is dynamic
    print(lift.diff(make(0.1, 10), make(0.1, 20)))
    ```

    ```text
    .captures['steps']: static value 10 != 20 (in make.<locals>.<lambda>)
    ```

    **Arguments:**

    - `a`, `b`: lifted functions, or pytrees containing them.

    **Returns:** a description with one line per difference, or `None` when the
    treedefs are equal.
    """
    la, ta = flatten_lifted(a, "diff")
    lb, tb = flatten_lifted(b, "diff")
    lines: list[str] = []
    if ta != tb:
        lines.append(f"structure: {ta} != {tb}")
        return "\n".join(lines)
    paths = [
        jtu.keystr(p)
        for p, _ in jtu.tree_flatten_with_path(a, is_leaf=stops_flattening)[0]
    ]
    for path, x, y in zip(paths, la, lb, strict=True):
        if is_lifted(x) and is_lifted(y):
            _diff_lifted(path, x, y, lines)
        elif is_lifted(x) or is_lifted(y):
            lines.append(f"{path}: {type(x).__name__} != {type(y).__name__}")
    return "\n".join(lines) if lines else None


def _diff_lifted(
    prefix: str, x: Lifted[Any, Any], y: Lifted[Any, Any], lines: list[str]
) -> None:
    if type(x) is not type(y):
        lines.append(f"{prefix}: {type(x).__qualname__} != {type(y).__qualname__}")
        return
    sa, sb = x._skeleton, y._skeleton
    if sa == sb:
        return
    before = len(lines)
    if len(sa.nodes) != len(sb.nodes):
        lines.append(
            f"{prefix}: the captured graphs differ in size "
            f"({len(sa.nodes)} nodes != {len(sb.nodes)})"
        )
    for i, (na, nb) in enumerate(zip(sa.nodes, sb.nodes, strict=False)):
        if na.key == nb.key:
            continue
        where = prefix + "".join(str(e) for e in node_path(sa, i))
        _diff_node(where, sa, sb, na, nb, lines)
    if len(lines) == before:
        lines.append(
            f"{prefix}: the captured graphs differ in how their parts refer to each other"
        )


def _diff_node(
    where: str, sa: Skeleton, sb: Skeleton, na: Any, nb: Any, lines: list[str]
) -> None:
    if type(na) is not type(nb):
        lines.append(f"{where}: {type(na).__name__} != {type(nb).__name__}")
        return
    if isinstance(na, FunctionNode):
        assert isinstance(nb, FunctionNode)
        ca, cb = na.info.code, nb.info.code
        if ca != cb:
            lines.append(
                f"{where}: different code: {na.qualname} ({ca.co_filename}:"
                f"{ca.co_firstlineno}) != {nb.qualname} ({cb.co_filename}:{cb.co_firstlineno})"
            )
            return
        if na.globals is not nb.globals:
            lines.append(f"{where}: {na.qualname} has different module globals")
        if (na.name, na.qualname) != (nb.name, nb.qualname):
            lines.append(f"{where}: name {na.qualname!r} != {nb.qualname!r}")
        if na.cells != nb.cells:
            lines.append(f"{where}: {na.qualname} shares its closure cells differently")
        for ta, tb in zip(na.defaults or (), nb.defaults or (), strict=False):
            _diff_template(sa, ta, tb, lines, na.qualname)
        if (na.defaults is None) != (nb.defaults is None):
            lines.append(f"{where}: {na.qualname} defaults present in one only")
        kwa, kwb = dict(na.kwdefaults or ()), dict(nb.kwdefaults or ())
        for k in kwa.keys() & kwb.keys():
            _diff_template(sa, kwa[k], kwb[k], lines, na.qualname)
    elif isinstance(na, CellNode):
        assert isinstance(nb, CellNode)
        owner = sa.nodes[na.owner]
        qualname = owner.qualname if isinstance(owner, FunctionNode) else "?"
        if na.template is None or nb.template is None:
            lines.append(
                f"{where}.captures[{na.name!r}]: empty cell in one only ({qualname})"
            )
        else:
            _diff_template(sa, na.template, nb.template, lines, qualname)
    elif isinstance(na, PartialNode):
        assert isinstance(nb, PartialNode)
        for ta, tb in zip((na.func, *na.args), (nb.func, *nb.args), strict=False):
            _diff_template(sa, ta, tb, lines, "partial")
        if len(na.args) != len(nb.args) or [k for k, _ in na.keywords] != [
            k for k, _ in nb.keywords
        ]:
            lines.append(f"{where}: partial arguments differ in number or names")
        for (_, ta), (_, tb) in zip(na.keywords, nb.keywords, strict=False):
            _diff_template(sa, ta, tb, lines, "partial")
    elif isinstance(na, MethodNode):
        assert isinstance(nb, MethodNode)
        _diff_template(sa, na.func, nb.func, lines, "method")
        _diff_template(sa, na.self_, nb.self_, lines, "method")


def _diff_template(
    sa: Skeleton, ta: Template, tb: Template, lines: list[str], owner: str
) -> None:
    if ta.key == tb.key:
        return
    path = "".join(str(e) for e in node_path(sa, sa.function_of(ta))) + _label(ta)
    if ta.treedef != tb.treedef:
        lines.append(f"{path}: structure {ta.treedef} != {tb.treedef} (in {owner})")
        return
    for pos, (u, v) in enumerate(zip(ta.slots, tb.slots, strict=True)):
        if u == v:
            continue
        sub = path + _subpath(ta, pos)
        if isinstance(u, Static) and isinstance(v, Static):
            why = (
                " (compared by identity: unhashable)"
                if u.by_identity or v.by_identity
                else ""
            )
            lines.append(
                f"{sub}: static value {u.value!r:.80} != {v.value!r:.80}{why} (in {owner})"
            )
        elif isinstance(u, Static) or isinstance(v, Static):
            kind = _kind
            lines.append(
                f"{sub}: {kind(u)} in one, {kind(v)} in the other (in {owner})"
            )
        else:
            lines.append(f"{sub}: refers to a different part of the graph (in {owner})")


def _kind(slot: object) -> str:
    return "static" if isinstance(slot, Static) else "dynamic"


def _label(t: Template) -> str:
    kind, name = t.label
    if kind in ("captures", "keywords"):
        return f".{kind}[{name!r}]"
    if kind == "args":
        return f".args[{name}]"
    return f".{kind}"


def _subpath(t: Template, pos: int) -> str:
    if t.treedef is None:
        return ""
    return "".join(str(e) for e in treedef_paths(t.treedef)[pos])
