"""Where each leaf sits: the key paths of a `Lifted`.

`tree_flatten_with_path` of a `Lifted` gives each leaf one `CapturePath` entry
that reads like `.captures['inner'].captures['lr']`, built from the standard
`jax.tree_util` keys. Paths are computed once per skeleton, top-down, in time and
memory linear in the graph.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from . import _trees as jtu
from ._skeleton import CellNode, Skeleton, Template

__all__ = ["CapturePath", "Elided", "leaf_paths", "node_path", "treedef_paths"]


def node_path(skeleton: Skeleton, index: int) -> tuple[Any, ...]:
    """Key entries from the root to node `index` (where it was first found)."""
    entries: list[tuple[Any, ...]] = []
    seen = 0
    while (parent := skeleton.parents[index]) is not None and seen <= len(
        skeleton.nodes
    ):
        seen += 1
        template, slot = parent
        entries.append(
            _template_entries(skeleton, template) + _slot_entries(template, slot)
        )
        index = template.owner
        if isinstance(skeleton.nodes[index], CellNode):
            index = skeleton.nodes[index].owner  # type: ignore[union-attr]
    return tuple(e for part in reversed(entries) for e in part)


def leaf_paths(skeleton: Skeleton) -> tuple[CapturePath, ...]:
    """A key path for every leaf, e.g. `.captures['inner'].captures['lr']`.

    Computed once, top-down, in time and memory linear in the graph: a path
    longer than `2 * _PATH_KEEP` entries (a closure nested thousands deep)
    keeps its first and last `_PATH_KEEP` entries around an `Elided` entry.
    """
    cached: tuple[CapturePath, ...] | None = skeleton.cache.get("paths")
    if cached is None:
        # Per function node: (head, tail, length) of its path from the root.
        spans: dict[int, tuple[tuple[Any, ...], tuple[Any, ...], int]] = {
            0: ((), (), 0)
        }
        for index in range(1, len(skeleton.nodes)):
            parent = skeleton.parents[index]
            if parent is None:
                continue
            template, slot = parent
            owner = skeleton.function_of(template)
            spans[index] = _extend(
                spans[owner],
                _template_entries(skeleton, template) + _slot_entries(template, slot),
            )
        paths: list[CapturePath | None] = [None] * skeleton.nleaves
        for template in skeleton.templates():
            span = spans[skeleton.function_of(template)]
            entries = _template_entries(skeleton, template)
            for pos, slot in enumerate(template.slots):
                if type(slot) is int:
                    paths[slot] = CapturePath(
                        _materialize(
                            _extend(span, entries + _slot_entries(template, pos))
                        )
                    )
        cached = tuple(p if p is not None else CapturePath(()) for p in paths)
        skeleton.cache["paths"] = cached
    return cached


def _template_entries(skeleton: Skeleton, template: Template) -> tuple[Any, ...]:
    return template.label.entries


def _slot_entries(template: Template, pos: int) -> tuple[Any, ...]:
    if template.treedef is None:
        return ()
    return treedef_paths(template.treedef)[pos]


@functools.lru_cache(maxsize=4096)
def treedef_paths(treedef: jtu.TreeDef) -> tuple[tuple[Any, ...], ...]:
    dummy = treedef.unflatten([_Marker()] * treedef.num_leaves)
    pairs, _ = jtu.tree_flatten_with_path(dummy, is_leaf=_is_marker)
    return tuple(tuple(p) for p, _ in pairs)


def _is_marker(x: object) -> bool:
    return isinstance(x, _Marker)


class _Marker:
    __slots__ = ()


_PATH_KEEP: Final = 16


def _extend(
    span: tuple[tuple[Any, ...], tuple[Any, ...], int], entries: tuple[Any, ...]
) -> tuple[tuple[Any, ...], tuple[Any, ...], int]:
    head, tail, length = span
    if len(head) < _PATH_KEEP:
        head = (head + entries)[:_PATH_KEEP]
    return head, (tail + entries)[-_PATH_KEEP:], length + len(entries)


def _materialize(span: tuple[tuple[Any, ...], tuple[Any, ...], int]) -> tuple[Any, ...]:
    head, tail, length = span
    if length <= 2 * _PATH_KEEP:
        return (
            (head + tail[len(tail) - (length - len(head)) :])
            if length > len(head)
            else head
        )
    return (*head, Elided(length - 2 * _PATH_KEEP), *tail)


class Elided:
    """Stands for the middle of a key path too long to spell out."""

    __slots__ = ("count",)

    def __init__(self, count: int) -> None:
        self.count = count

    def __str__(self) -> str:
        return f"...({self.count} more)..."

    def __repr__(self) -> str:
        return f"Elided({self.count})"

    def __eq__(self, other: object) -> bool:
        return type(other) is Elided and other.count == self.count

    def __hash__(self) -> int:
        return hash(("elided", self.count))


class CapturePath:
    """One pytree key entry standing for the whole way from a `Lifted` to a leaf.

    `str()` reads like `.captures['inner'].captures['lr']`; `entries` holds the
    standard `jax.tree_util` keys (`GetAttrKey`, `DictKey`, `SequenceKey`, ...).
    """

    __slots__ = ("entries",)

    def __init__(self, entries: tuple[Any, ...]) -> None:
        self.entries = entries

    def __str__(self) -> str:
        return "".join(str(e) for e in self.entries)

    def __repr__(self) -> str:
        return f"CapturePath({self})"

    def __eq__(self, other: object) -> bool:
        return type(other) is CapturePath and other.entries == self.entries

    def __hash__(self) -> int:
        return hash(self.entries)


CapturePath.__module__ = "lift"
