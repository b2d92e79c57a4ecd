"""Parts of skeletons that fresh lifts of small graphs share.

A fresh lift of a known shape (an optimizer) makes no one-slot template, cell
or tuple of references anew: it finds the one an earlier lift made. None is
changed once made."""

from __future__ import annotations

from typing import Final

from .._base.caches import BoundedDict
from .._holders import trees as jtu
from .._holders.labels import Label
from .nodes import CellNode, Ref, Static, Template

_REFS: Final = [Ref(i) for i in range(1024)]


def ref_to(index: int) -> Ref:
    """The `Ref` of node `index`, shared in a graph of up to 1 024 nodes."""
    return _REFS[index] if index < 1024 else Ref(index)


# One-slot templates and cells of small graphs, seen lately: a fresh lift of a
# known shape (an optimizer) makes none anew. Keyed by slot (a leaf index, or a
# shared atom's id), owner and label's id; each entry holds its atom and label,
# so no id is reused while it lives. Neither is changed once made (a one-slot
# template copies nothing). A wide closure's leaves make their own.
_ONE_SLOT: BoundedDict[tuple[int, ...], Template] = BoundedDict(512)
_CELLS: BoundedDict[tuple[int, ...], CellNode] = BoundedDict(512)
_REF_TEMPLATES: BoundedDict[tuple[int, ...], Template] = BoundedDict(512)
_SMALL: Final = 64


def _slot_key(slot: int | Static, owner: int, label: Label) -> tuple[int, ...] | None:
    if owner >= _SMALL:
        return None
    if type(slot) is int:
        return (slot, owner, id(label)) if slot < _SMALL else None
    return (id(slot), owner, id(label), 0)  # never equal to a leaf's key


def one_slot(slot: int | Static, owner: int, label: Label) -> Template:
    """The template of one leaf index or atom (`atom_static`), shared."""
    key = _slot_key(slot, owner, label)
    found = _ONE_SLOT.get(key) if key else None
    if found is None:
        found = Template(None, (slot,), owner, label)
        if key:
            _ONE_SLOT.add(key, found)
    return found


def cell_of(slot: int | Static, owner: int, label: Label) -> CellNode:
    """The cell holding one leaf index or atom (`one_slot`), shared."""
    key = _slot_key(slot, owner, label)
    found = _CELLS.get(key) if key else None
    if found is None:
        found = CellNode(one_slot(slot, owner, label), label, owner)
        if key:
            _CELLS.add(key, found)
    return found


def refs_template(
    treedef: jtu.TreeDef, indices: list[int], owner: int, label: Label
) -> Template:
    """The template of a tuple of nodes (`Ref`s at `indices`), shared.

    The entry holds its treedef and label, so their ids are not reused."""
    key = (id(treedef), owner, id(label), *indices)
    found = _REF_TEMPLATES.get(key)
    if found is None:
        slots = tuple(map(ref_to, indices))
        found = _REF_TEMPLATES.add(
            key, Template(treedef, slots, owner, label, None, None)
        )
    return found
