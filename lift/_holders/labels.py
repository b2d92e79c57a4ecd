"""How a part of a holder is named: a `Label`.

A label has a kind (a cell, a default, a partial's argument, a field, ...)
and a key. Capture, rebuild, key paths, `repr`, `diff` and the leak scan name
the parts they read by labels. Labels are interned: each is made once."""

from __future__ import annotations

from typing import Any, Final

from .._base.caches import BoundedDict
from . import trees as jtu

# The kinds of part, with how each reads on a holder `o`.
CELL: Final = "cell"  # a free variable: `o.__closure__[i].cell_contents`
DEFAULT: Final = "default"  # `o.__defaults__[i]`
KWDEFAULT: Final = "kwdefault"  # `o.__kwdefaults__[name]`
ATTR: Final = "attr"  # a function attribute: `o.__dict__[name]`
FUNC: Final = "func"  # a partial's function: `o.func`
ARG: Final = "arg"  # `o.args[i]`
KEYWORD: Final = "keyword"  # `o.keywords[name]`
METHOD_FUNC: Final = "__func__"  # a bound method's function
SELF: Final = "__self__"  # a bound method's object
WRAPPED: Final = "__wrapped__"  # what a registered holder wraps
FIELD: Final = "field"  # an object's attribute or slot: `o.name`
CACHED: Final = "<cache>"  # what a `functools.lru_cache` keeps for a key
CACHE_KEY: Final = "<cache key>"  # a key of such a cache
LOCAL: Final = "<locals>"  # a local variable of a suspended generator
CLASS: Final = "__class__"  # the class an instance reads attributes from
STATIC: Final = "<static>"  # a pytree node's static (aux) data

# The parts `Lifted.captures` lists: a function's variables, a partial's keywords.
CAPTURES: Final = frozenset({CELL, DEFAULT, KWDEFAULT, KEYWORD})

# How a leak report says the holder keeps the value.
_ROLES: Final = {
    CELL: "captured variable",
    DEFAULT: "default of parameter",
    KWDEFAULT: "default of parameter",
    ATTR: "function attribute",
    ARG: "partial argument",
    KEYWORD: "partial argument",
    SELF: "bound object",
    LOCAL: "local variable of a suspended generator",
}


class Label:
    """How one part of a holder is reached, and what it is called.

    - `kind`: one of the kinds above; `key`: the name or index within it.
    - `variable`: the name `static=` and messages use, or `None`. Free
      variables, defaults' parameters, attributes and partial keywords have one.
    - `entries`: the `jax.tree_util` key entries of the part (`.captures['lr']`);
      `str(label)` is their text.
    - `role`: how a leak report describes the holding (`"captured variable"`).
      `None` for a part that holds no variable of yours.

    Labels are interned: `Label.of(kind, key)` returns one object per part name.
    """

    __slots__ = ("entries", "ident", "key", "kind", "role", "text", "variable")

    def __init__(self, kind: str, key: str | int | None, name: str | None) -> None:
        self.kind = kind
        self.key = key
        self.role = _ROLES.get(kind)
        if name is None and kind in (CELL, KWDEFAULT, ATTR, KEYWORD, LOCAL):
            name = key  # type: ignore[assignment]
        self.variable: str | None = name
        if kind in (CELL, DEFAULT, KWDEFAULT):
            entries = (jtu.GetAttrKey("captures"), jtu.DictKey(name))
        elif kind == ATTR:
            entries = (jtu.GetAttrKey("__dict__"), jtu.DictKey(key))
        elif kind == ARG:
            entries = (jtu.GetAttrKey("args"), jtu.SequenceKey(key))  # type: ignore[arg-type]
        elif kind == KEYWORD:
            entries = (jtu.GetAttrKey("keywords"), jtu.DictKey(key))
        elif kind == FIELD:
            entries = (jtu.GetAttrKey(str(key)),)
        elif kind == LOCAL:
            entries = (jtu.GetAttrKey(LOCAL), jtu.GetAttrKey(str(key)))
        else:
            entries = (jtu.GetAttrKey(kind),)
        self.entries: tuple[Any, ...] = entries
        self.text = "".join(str(e) for e in entries)
        # What the label is compared by, as a tuple (skeleton keys hold this).
        self.ident = (kind, key, name)

    @classmethod
    def of(
        cls, kind: str, key: str | int | None = None, name: str | None = None
    ) -> Label:
        """The label of a part (`name`: a default's parameter name)."""
        label = _interned.get((kind, key, name))
        if label is None:
            # Emptied when full: labels compare by value, a new one is as good.
            label = _interned.add((kind, key, name), cls(kind, key, name))
        return label

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is Label and self.ident == other.ident)

    def __hash__(self) -> int:
        return hash(self.ident)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Label({self.text})"


_interned: BoundedDict[tuple[str, Any, Any], Label] = BoundedDict(4096)


def variable_str(label: Label) -> str:
    name = label.variable
    return f"`{label.text}`" if name is None else f"variable {name!r}"
