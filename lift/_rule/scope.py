"""`dynamic=` given as names: which nodes of the walk a named capture reaches.

The nodes reached from a named capture are in its scope. Their Python floats
are leaves; the floats outside stay static. A named `int` or `bool` is a leaf
too. A node walked outside the scope may be reached again from inside it.
Then the walk is redone with its object in scope (`rescope`). So the answer
does not depend on walk order.
"""

from __future__ import annotations

from typing import Any


class Scope:
    """The scope of one walk.

    `named` holds the names `dynamic=` gave; `None` pins nothing. `ids` holds
    the objects an earlier walk found in scope after walking them outside.
    """

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
        """Whether a capture's Python floats stay static, by node and variable.

        They do when `dynamic=` names variables, and this one is neither named
        nor inside a named one.
        """
        named = self.named
        return named is not None and name not in named and owner not in self.nodes

    def reached(self, index: int, obj: Any, pinned: bool) -> None:
        """Note that node `index` (of `obj`) is reached again.

        Reached from inside the scope, it should have been walked there.
        """
        if not pinned and self.named is not None and index not in self.nodes:
            self.late.add(id(obj))

    def rescope(self) -> frozenset[int] | None:
        """The objects in scope for a walk to redo, or `None`.

        A walk is redone when a node walked outside the scope was reached
        from inside it.
        """
        return frozenset(self.objects | self.late | self.ids) if self.late else None
