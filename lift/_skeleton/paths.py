"""Where each leaf sits: the key paths of a `Lifted`.

`tree_flatten_with_path` of a `Lifted` gives each leaf one `CapturePath`.
It reads like `.captures['inner'].captures['lr']`, made of `jax.tree_util`'s
keys. Paths are computed once per skeleton, top-down, in linear time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Final, TypeAlias, cast

from .._holders import trees as jtu
from .._holders.closure import METHOD, PARTIAL
from .._holders.labels import ARG, CAPTURES, KEYWORD, Label
from .._holders.trees import treedef_paths
from .nodes import FunctionNode, Ref, Template
from .rebuild import build_nodes
from .skeleton import LiftedParts, Skeleton, arrays_of, skeleton_of


def leaf_paths(skeleton: Skeleton) -> tuple[CapturePath, ...]:
    """A key path for every leaf, e.g. `.captures['inner'].captures['lr']`.

    Computed once, top-down, in time and memory linear in the graph. A path
    longer than `2 * _PATH_KEEP` entries keeps its first and last
    `_PATH_KEEP` entries around an `Elided` one.
    """
    cached: tuple[CapturePath, ...] | None = skeleton.paths
    if cached is None:
        spans: dict[int, _Span] = {0: ((), (), 0)}  # per function node
        for index in range(1, len(skeleton.nodes)):
            parent = skeleton.parents[index]
            if parent is not None:
                template, slot = parent
                owner = skeleton.function_of(template)
                spans[index] = _extend(spans[owner], _entries(template, slot))
        paths = [CapturePath(())] * skeleton.nleaves
        for template in skeleton.templates():
            span = spans[skeleton.function_of(template)]
            for pos, slot in enumerate(template.slots):
                if type(slot) is int:
                    paths[slot] = _path(_extend(span, _entries(template, pos)))
        cached = skeleton.paths = tuple(paths)
    return cached


def _entries(template: Template, pos: int) -> tuple[Any, ...]:
    """The key entries from the template's owner to its slot `pos`."""
    inner = () if template.treedef is None else treedef_paths(template.treedef)[pos]
    return template.label.entries + inner


_PATH_KEEP: Final = 16

# A path from the root, kept in linear memory: its first and last `_PATH_KEEP`
# entries, and its length.
_Span: TypeAlias = tuple[tuple[Any, ...], tuple[Any, ...], int]


def _extend(span: _Span, entries: tuple[Any, ...]) -> _Span:
    head, tail, length = span
    if len(head) < _PATH_KEEP:
        head = (head + entries)[:_PATH_KEEP]
    return head, (tail + entries)[-_PATH_KEEP:], length + len(entries)


def _path(span: _Span) -> CapturePath:
    head, tail, length = span
    if length <= 2 * _PATH_KEEP:  # the entries `head` lacks end `tail`
        return CapturePath(head + tail[len(tail) - (length - len(head)) :])
    return CapturePath((*head, Elided(length - 2 * _PATH_KEEP), *tail))


@dataclasses.dataclass(frozen=True, slots=True)
class Elided:
    """Stands for the middle of a key path too long to spell out."""

    count: int

    def __str__(self) -> str:
        return f"...({self.count} more)..."

    def __repr__(self) -> str:
        return f"Elided({self.count})"


@dataclasses.dataclass(frozen=True, slots=True)
class CapturePath:
    """The key entry of a `Lifted` in a key path: the whole way to one leaf.

    `jax.tree_util.tree_flatten_with_path` gives each leaf of a `Lifted` one
    `CapturePath`. Its `str()` reads like `.captures['inner'].captures['lr']`.
    That is Python reaching the leaf from the `Lifted`. Captured functions
    come back from [`Lifted.captures`][lift.Lifted.captures] lifted in turn.
    `entries` holds the `jax.tree_util` keys it stands for (`GetAttrKey`,
    `DictKey`, ...). A path thousands of functions deep keeps its first and
    last 16 entries around an `Elided` one.

    ```python
    import jax
    import optax
    import lift

    opt = lift.lift(optax.sgd(0.1))
    [(path, leaf)] = jax.tree_util.tree_flatten_with_path(opt)[0]
    print(jax.tree_util.keystr(path))
    assert isinstance(path[-1], lift.CapturePath)
    assert opt.update.captures["update_fns"][1].captures["tx"].update.captures[
        "step_size"
    ] is leaf
    ```

    ```text
    .update.captures['update_fns'][1].captures['tx'].update.captures['step_size']
    ```
    """

    entries: tuple[Any, ...]

    def __str__(self) -> str:
        return "".join(str(e) for e in self.entries)

    def __repr__(self) -> str:
        return f"CapturePath({self})"


CapturePath.__module__ = "lift"


# -- following a key path by hand -------------------------------------------------


def _root_parts(skeleton: Skeleton) -> list[tuple[Label, Template]]:
    """The root's parts, as `Lifted.captures` lists them (empty cells left out)."""
    return [(label, t) for label, t in skeleton.parts_of(0) if t is not None]


# Makes a rebuilt function a `Lifted`, given the options.
AsLifted: TypeAlias = Callable[[Any, frozenset[str], Any], Any]


# The holders `captures` gives back as a `Lifted`, as it does functions.
_AS_LIFTED: Final = (PARTIAL, METHOD)


def _materializer(
    x: LiftedParts, templates: list[Template], lifted: AsLifted
) -> tuple[tuple[Any, ...], list[Any]]:
    """The leaves, and the rebuilt nodes.

    The functions `templates` refer to are `Lifted`, with `x`'s options.
    So `.captures` goes on at depth."""
    skeleton = skeleton_of(x)
    leaves = arrays_of(x)
    objs = build_nodes(skeleton, leaves)
    names, dynamic = skeleton.options or (frozenset[str](), None)
    for i in {slot.index for t in templates for slot in t.slots if type(slot) is Ref}:
        node = skeleton.nodes[i]
        if type(node) is FunctionNode or getattr(node, "holder", None) in _AS_LIFTED:
            objs[i] = lifted(objs[i], names, dynamic)
    return leaves, objs


def captures_of(x: LiftedParts, lifted: AsLifted) -> dict[str, Any]:
    """`x.captures`: the root's captured variables by name.

    Leaves are current; captured functions are `Lifted` (`Lifted.captures`)."""
    parts = [
        (label, t) for label, t in _root_parts(skeleton_of(x)) if label.kind in CAPTURES
    ]
    leaves, objs = _materializer(x, [t for _, t in parts], lifted)
    return {
        cast(str, label.variable): t.materialize(leaves, objs) for label, t in parts
    }


_NOT_FOUND: Final = object()


def attribute_of(x: LiftedParts, name: str, lifted: AsLifted) -> Any:
    """The part of `x`'s root that a key path names `.{name}`, or `_NOT_FOUND`.

    Such parts are a partial's `args`, `keywords` and `func`, and a bound
    method's `__func__` and `__self__`."""
    key = jtu.GetAttrKey(name)
    parts = [
        (label, t)
        for label, t in _root_parts(skeleton_of(x))
        if label.entries and label.entries[0] == key
    ]
    if not parts:
        return _NOT_FOUND
    leaves, objs = _materializer(x, [t for _, t in parts], lifted)
    kind = parts[0][0].kind
    if kind == ARG:
        ordered = sorted(parts, key=lambda p: cast(int, p[0].key))
        return tuple(t.materialize(leaves, objs) for _, t in ordered)
    if kind == KEYWORD:
        return {cast(str, lb.key): t.materialize(leaves, objs) for lb, t in parts}
    return parts[0][1].materialize(leaves, objs)
