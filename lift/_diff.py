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
        lines.append(f"{where}: {_what(na)} in one, {_what(nb)} in the other")
        return
    owner = (
        "partial"
        if isinstance(na, PartialNode)
        else "method"
        if isinstance(na, MethodNode)
        else "lift.jit"
    )
    if isinstance(na, FunctionNode):
        assert isinstance(nb, FunctionNode)
        owner = na.qualname
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
        if na.meta != nb.meta:
            lines.append(
                f"{where}: {na.qualname} has a different docstring, module or "
                "annotations"
            )
        if (na.has_defaults, na.has_kwdefaults) != (nb.has_defaults, nb.has_kwdefaults):
            lines.append(f"{where}: {na.qualname} has defaults in one only")
    elif isinstance(na, CellNode):
        assert isinstance(nb, CellNode)
        fn = sa.nodes[na.owner]
        owner = fn.qualname if isinstance(fn, FunctionNode) else "?"
        if (na.template is None) != (nb.template is None):
            lines.append(f"{where}{na.label}: empty cell in one only ({owner})")
            return
    pa, pb = dict(na.parts()), dict(nb.parts())
    for label in pa.keys() - pb.keys():
        lines.append(f"{where}{label}: captured in one only (in {owner})")
    for label in pb.keys() - pa.keys():
        lines.append(f"{where}{label}: captured in one only (in {owner})")
    for label in pa.keys() & pb.keys():
        _diff_template(sa, pa[label], pb[label], lines, owner)
    if [label for label in pa] != [label for label in pb] and pa.keys() == pb.keys():
        lines.append(f"{where}: {owner}'s captures are in a different order")


def _what(node: Any) -> str:
    if isinstance(node, FunctionNode):
        return f"a function ({node.qualname})"
    if isinstance(node, CellNode):
        return "a closure cell"
    if isinstance(node, PartialNode):
        return "a functools.partial"
    if isinstance(node, MethodNode):
        return "a bound method"
    return "a lift.jit function"


def _diff_template(
    sa: Skeleton, ta: Template, tb: Template, lines: list[str], owner: str
) -> None:
    if ta.key == tb.key:
        return
    path = "".join(str(e) for e in node_path(sa, sa.function_of(ta))) + _label(ta)
    if ta.treedef != tb.treedef or ta.order != tb.order:
        sa_, sb_ = (
            (ta.order[0] if ta.order else ta.treedef),
            (tb.order[0] if tb.order else tb.treedef),
        )
        lines.append(f"{path}: structure {sa_} != {sb_} (in {owner})")
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
    return t.label.text


def _subpath(t: Template, pos: int) -> str:
    if t.treedef is None:
        return ""
    return "".join(str(e) for e in treedef_paths(t.treedef)[pos])
