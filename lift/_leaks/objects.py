"""How the leak scan opens what `lift._holders.held` does not describe.

`held.parts` describes functions, partials, methods, cells, generators,
caches, containers and weak references; `lift._leaks.scan` opens classes
and exceptions. Here the scan opens:

- objects, by their attributes and slots, read without running code of
  their class;
- pytrees, by their children and static data;
- `Lifted`, and traced programs' constants.

How to walk each type is decided once per type and scan (a plan). What
cannot be opened is named (`Unopened`), never raised."""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any, Final, cast

import jax
import numpy as np

from .. import _compat
from .._base.atoms import UNOPENED
from .._base.owners import is_library_type, is_user_module
from .._holders.attributes import own_attributes, static_attribute
from .._holders.closure import aux_parts, function_of, instance_class, slots_of
from .._holders.held import ATTR
from .._holders.stdlib import OPENED_BY_SCANS, opened_by_referents, referent_parts
from .._holders.trees import keystr, one_level, tree_flatten_with_path, tree_leaves
from .report import (
    STATIC_FIELD,
    STORED_LIFTED,
    PathLabel,
    Unopened,
    chain_to,
    error_text,
    path_text,
)

_Array: type[Any] = jax.Array

# Per-type plans for objects that are not one of the core kinds.
_SKIP, _LIFTED, _JAXPR, _PYTREE, _OBJECT, _LIBRARY = range(6)

# What the scan never opens: `UNOPENED`, but for the tracebacks, frames and
# slices it opens through their readers (`OPENED_BY_SCANS`).
SCAN_UNOPENED: Final = UNOPENED - OPENED_BY_SCANS


def _object_kind(cls: type) -> int:
    return _LIBRARY if is_library_type(cls) else _OBJECT


class ObjectWalk:
    """The queue of a breadth-first scan (each entry its parent and label)
    and the opening of objects; `LeakWalk` adds the core kinds and the run."""

    def __init__(self, home: str | None) -> None:
        self.home = home
        self.seen: set[int] = set()
        self.keep: list[Any] = []  # temporaries built by the walk keep their ids
        # (parent entry, label, (function, variable, kind) or None, path restarts)
        self.entries: list[
            tuple[int, PathLabel, tuple[Any, str | None, str | None] | None, bool]
        ] = []
        self.queue: collections.deque[tuple[Any, int]] = collections.deque()
        self.plain: set[type] = set()  # classes whose instances hold a __dict__
        self.plans: dict[type, int] = {}
        # What could not be opened: (entry, what was being read, the error).
        self.failed: list[tuple[int, str, BaseException]] = []

    def push(
        self,
        obj: Any,
        parent: int,
        label: PathLabel,
        edge: tuple[Any, str | None, str | None] | None = None,
        reset: bool = False,
    ) -> None:
        # Exact types: a subclass of `int` may hold attributes of its own.
        if type(obj) not in SCAN_UNOPENED and id(obj) not in self.seen:
            self.seen.add(id(obj))
            self.queue.append((obj, len(self.entries)))
            self.entries.append((parent, label, edge, reset))

    def parts(self, parts: Iterable[tuple[PathLabel, Any]], index: int) -> None:
        """Push `(label, value)` pairs, as `lift._holders.held` gives them: the
        hot loop (`push` inlined)."""
        atomic, seen = SCAN_UNOPENED, self.seen
        entries, queue = self.entries, self.queue
        for label, value in parts:
            if type(value) in atomic:
                continue
            i = id(value)
            if i in seen:
                continue
            seen.add(i)
            entries.append((index, label, None, False))
            queue.append((value, len(entries) - 1))

    def kept_parts(self, parts: Iterable[tuple[PathLabel, Any]], index: int) -> None:
        """Push `parts` the walk builds: kept for the scan, so that their ids
        stay theirs."""
        parts = list(parts)
        self.keep.append(parts)
        self.parts(parts, index)

    def plan(self, obj: Any, cls: type) -> tuple[int, bool]:
        """How to walk objects of type `cls`, and whether that holds for every
        instance (decided once per type and scan when it does)."""
        if function_of(obj) is not None:
            return _LIFTED, True
        if _compat.holds_consts(obj):
            return _JAXPR, True
        if isinstance(obj, _Array | np.generic):
            return _SKIP, True
        try:
            leaves = tree_leaves(obj, is_leaf=one_level(obj))
        except Exception:
            # This instance does not flatten (a `lift.jit` function whose
            # captures cannot): walked as an object, and the type's other
            # instances decided by themselves, so that the report does not
            # depend on which instance the walk met first.
            return _object_kind(cls), False
        is_leaf = len(leaves) == 1 and leaves[0] is obj
        return (_object_kind(cls) if is_leaf else _PYTREE), True

    def other(self, obj: Any, cls: type, index: int) -> None:
        kind = self.plans.get(cls)
        if kind is None:
            kind, stable = self.plan(obj, cls)
            if stable:
                self.plans[cls] = kind
            if kind == _OBJECT:
                # The class attributes its instances read: walked once, named
                # from the first instance met.
                self.parts(instance_class(cls), index)
                if (
                    stable
                    and not slots_of(cls)
                    and not callable(cast(object, obj))
                    and cls.__getattribute__ is object.__getattribute__
                    and type(self.attribute(obj, "__dict__", index)) is dict
                ):
                    self.plain.add(cls)  # walked in `run`: its `__dict__` only
        if kind in (_OBJECT, _LIBRARY):
            self.walk_object(obj, cls, index, kind)
        elif kind == _PYTREE:
            try:
                children, treedef = tree_flatten_with_path(obj, is_leaf=one_level(obj))
            except Exception:  # this instance does not flatten: an object
                self.walk_object(obj, cls, index, _object_kind(cls))
                return
            self.keep.append(children)
            self.parts([(keystr(path), child) for path, child in children], index)
            for label, aux in aux_parts(treedef):
                self.keep.append(aux)
                self.push(aux, index, label, (obj, None, STATIC_FIELD))
        elif kind == _LIFTED:
            rebuild = function_of(obj)
            assert rebuild is not None
            plain = rebuild(obj)
            self.keep.append(plain)
            self.push(plain, index, "", (obj, None, STORED_LIFTED))
            self.push(obj.__wrapped__, index, ".__wrapped__")
        elif kind == _JAXPR:
            # The constants a traced program closes over (jax.closure_convert and
            # jax.make_jaxpr keep them here).
            self.kept_parts(
                [((".consts[{}]", i), c) for i, c in enumerate(obj.consts)], index
            )

    def walk_object(self, obj: Any, cls: type, index: int, kind: int) -> None:
        """An object's `__wrapped__`, and unless a library's, its attributes and
        slots (a C iterator, `map`, `itemgetter`: what it holds)."""
        if callable(obj):  # `None` is never pushed
            self.push(self.attribute(obj, "__wrapped__", index), index, ".__wrapped__")
        if opened_by_referents(cls):
            self.kept_parts(referent_parts(obj), index)
        elif kind != _LIBRARY:
            self.own_attributes(obj, slots_of(cls), index)

    def own_attributes(self, obj: Any, slots: tuple[str, ...], index: int) -> None:
        try:
            self.parts([((ATTR, k), v) for k, v in own_attributes(obj, slots)], index)
        except Exception as exc:  # a `__dict__` only its code gives: named
            self.failed.append((index, ".__dict__", exc))

    def attribute(self, obj: Any, name: str, index: int) -> Any:
        """`getattr(obj, name, None)` without running code of the object's
        class (`static_attribute`).

        What only that code could tell (a property), or what raises, is named
        as what was not opened."""
        try:
            if not is_user_module(type(obj).__module__):
                # JAX's, NumPy's and the standard library's classes (a
                # `StrongLRUCache`'s `__wrapped__`, a `Path`'s slots) may run
                # their own code; the user's classes' never runs in a scan.
                return getattr(obj, name, None)
            return static_attribute(obj, name, None)
        except Exception as exc:
            self.failed.append((index, f".{name}", exc))
            return None

    def unopened(self) -> list[Unopened]:
        """What this scan could not open, with the path to each."""
        return [
            Unopened(
                path_text(self.entries, chain_to(self.entries, index), self.home)
                + where,
                error_text(exc),
            )
            for index, where, exc in self.failed
        ]
