"""`dynamic=` given as names: which nodes of the walk are in a named
capture's scope.

The nodes reached from a named capture are in scope: their Python floats are
leaves, and the floats outside stay static. A node walked outside the scope
and reached again from inside it should have been walked inside: the walk is
redone with its object in scope (`rescope`), so that the answer does not
depend on walk order."""

from __future__ import annotations

from typing import Any


class Scope:
    """The scope of one walk: `named`, the names `dynamic=` gave (`None`: no
    names, nothing is pinned); `ids`, the objects a walk before found in scope
    after it had walked them outside."""

    __slots__ = ("ids", "late", "named", "nodes", "objects")

    def __init__(self, named: frozenset[str] | None, ids: frozenset[int]) -> None:
        self.named = named
        self.ids = ids
        self.nodes: set[int] = set()  # in scope, by node index
        self.objects: set[int] = set()  # their objects' ids
        self.late: set[int] = set()  # walked outside the scope, reached inside

    def add(self, index: int, obj: Any) -> None:
        self.nodes.add(index)
        self.objects.add(id(obj))

    def pinned(self, owner: int, name: str | None) -> bool:
        """Whether the Python floats of a capture (by its node and variable) stay
        static: `dynamic=` names variables, and this one is neither named nor
        inside a named one."""
        named = self.named
        return named is not None and name not in named and owner not in self.nodes

    def reached(self, index: int, obj: Any, pinned: bool) -> None:
        """Note that node `index` (of `obj`), made before, is reached again: from
        inside the scope, it should have been walked there."""
        if not pinned and self.named is not None and index not in self.nodes:
            self.late.add(id(obj))

    def rescope(self) -> frozenset[int] | None:
        """The objects in scope, for a walk to redo, when some node was reached
        from inside the scope after being walked outside it; else `None`."""
        if not self.late:
            return None
        return frozenset(self.objects | self.late | self.ids)
