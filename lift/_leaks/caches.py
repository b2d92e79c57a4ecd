"""Escaped tracers that no root reaches.

The closure holding one is found from its referrers. Tracers kept only by
JAX's and lift's caches and finalizers are named as such: retained, but not
stored by the code under test. Those caches are recognised as objects,
through their modules. Any other library's cache is the code under test's
holder, and reported."""

from __future__ import annotations

import gc
import sys
import types
import weakref
from collections.abc import Iterable
from typing import Any, Final, NamedTuple, cast

from .._base import gc as _gc
from .._base.atoms import UNOPENED
from .._base.owners import is_user_function
from .._compat import jax_checks
from .._holders.attributes import static_attribute
from .._holders.closure import user_class
from .._holders.reach import reach
from .._holders.stdlib import LRU_WRAPPER
from .chain import cell_holder
from .report import Leak, closure_leak


def closure_holding(tracer: Any) -> Leak | None:
    """The report for an escaped tracer that no root reaches, when a closure
    holds it. It names the function, its variable and its line. They are
    found from the tracer's referrers (cell, closure, function). `None` if no
    function holds it.

    Costs a few passes over the heap (`gc.get_referrers`): only for tracers
    known to have escaped."""
    with _gc.paused():
        for cell in gc.get_referrers(tracer):
            if type(cell) is types.CellType and (found := cell_holder(cell)):
                return closure_leak(*found, tracer)
    return None


def holder_kinds(tracers: list[Any], mine: Iterable[Any] = ()) -> list[str]:
    """The kinds of object that hold `tracers` directly (`jaxlib...PyTreeDef`,
    `tuple`), for a report that cannot name a variable.

    What lift could not look inside is named rather than skipped. `mine`: the
    caller's own lists."""
    ignore = {id(tracers), *map(id, mine)}
    kinds: dict[str, None] = {}
    with _gc.paused():
        refs = [r for r in gc.get_referrers(*tracers) if id(r) not in ignore]
        ignore.add(id(refs))
        for ref in refs:
            if type(ref) is types.FrameType:
                continue
            # A tuple, list, dict or cell says little: what holds it says more.
            # One that only frames hold is a local of code running now (the
            # caller's own lists), not where the tracer was kept.
            if type(ref) in _PLAIN_HOLDERS:
                outer = [r for r in gc.get_referrers(ref) if id(r) not in ignore]
                ref = next((r for r in outer if type(r) is not types.FrameType), None)
                if ref is None:
                    continue
            t: type[Any] = type(ref)  # pyright: ignore[reportUnknownVariableType]
            kinds[f"{t.__module__}.{t.__qualname__}".removeprefix("builtins.")] = None
    return list(kinds)


_PLAIN_HOLDERS: frozenset[type] = frozenset({tuple, list, dict, types.CellType})


#: The most objects `split_cached` visits inside libraries' caches.
_CACHE_OBJECTS = 2_000_000


class CacheHolders(NamedTuple):
    """Escaped tracers that no variable of the user's reaches, kept alive by
    libraries' caches (JAX's: `jax._src.pjit._infer_params_cached`, ...).

    They are retained, but not stored by the code under test. `names`: those
    caches."""

    names: tuple[str, ...]

    def __str__(self) -> str:
        shown = ", ".join(self.names[:4])
        more = f" and {len(self.names) - 4} more" if len(self.names) > 4 else ""
        return (
            f"held by the libraries' caches {shown}{more}, not stored by the code "
            "under test (a cache is emptied by its cache_clear(), most of JAX's "
            "by jax.clear_caches(); a finalizer holds until its object dies)"
        )


# Whose caches may keep a tracer without it being the code under test's leak:
# JAX's and lift's, the only holders excused.
_CACHE_OWNERS: Final = frozenset({"jax", "jaxlib", "lift"})


def _owned(name: object) -> bool:
    return type(name) is str and name.partition(".")[0] in _CACHE_OWNERS


def _is_cache(value: Any) -> bool:
    """Whether `value` is one of the caches JAX and lift keep.

    It is recognised as an object, not by where its file lies. A cache is a
    `weakref_lru_cache`, a `functools.lru_cache` function, or a function with
    its own `cache_clear` (JAX's `util.cache()`). Read without running code
    of `value`'s."""
    cls: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if cls is LRU_WRAPPER or cls.__name__ == "WeakrefLRUCache":
        return True
    if cls is types.FunctionType:
        return callable(value.__dict__.get("cache_clear"))
    return False


def _library_caches() -> list[tuple[str, Any]]:
    """The caches JAX and lift keep at module level, each named once by the
    function it caches.

    They are found through their modules: the `sys.modules` entries of `jax`,
    `jaxlib` and `lift`."""
    out: dict[int, tuple[str, Any]] = {}
    for name, module in list(sys.modules.items()):
        if not _owned(name) or type(cast(object, module)) is not types.ModuleType:
            continue
        for key, value in list(vars(module).items()):
            if id(value) in out or not _is_cache(value):
                continue
            inner = static_attribute(value, "__wrapped__") or value
            where = static_attribute(inner, "__module__")
            what = static_attribute(inner, "__qualname__")
            named = type(where) is str and type(what) is str
            out[id(value)] = (f"{where}.{what}" if named else f"{name}.{key}", value)
    return sorted(out.values(), key=lambda c: c[0])


def _library_finalizers() -> list[tuple[str, Any]]:
    """The pending `weakref.finalize` callbacks that JAX and lift registered.

    JAX registers one per constant a trace stages, holding the trace. Each is
    named by the callback: what it will call and with what. Kept alive by
    `weakref.finalize`'s own registry, which no variable reaches."""
    registry: Any = weakref.finalize._registry  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownVariableType]
    out: dict[str, list[Any]] = {}
    for finalizer in list(cast(dict[Any, Any], registry)):
        try:
            info = finalizer.peek()
        except Exception:  # not a finalizer as the standard library makes them
            continue
        if info is None:
            continue
        _, func, args, kwargs = info
        inner = func.__func__ if type(func) is types.MethodType else func
        is_function = type(inner) is types.FunctionType
        if not is_function or not _owned(inner.__globals__.get("__name__")):
            continue  # another's finalizer: what it holds is not excused
        label = f"{inner.__module__}.{inner.__qualname__} (a pending finalizer)"
        out.setdefault(label, []).append((func, args, kwargs))
    return sorted(out.items())


def _users_object(obj: Any) -> bool:
    """Whether `obj` belongs to the code under test, not to JAX or lift.

    It does as a function of a user's module or an instance of a user's
    class. A cache's
    path to a tracer through one is the user's holding, never excused."""
    if type(obj) is types.FunctionType:
        return is_user_function(obj)
    return user_class(type(obj))  # pyright: ignore[reportUnknownArgumentType]


def split_cached(tracers: list[Any]) -> tuple[CacheHolders | None, list[Any]]:
    """The libraries' caches that reach some of `tracers` (or `None`), and the
    tracers they do not reach.

    Walks each cache's contents as the garbage collector sees them
    (`gc.get_referents`), iteratively and bounded: only for tracers known to
    have escaped."""
    names: dict[str, None] = {}
    caches = [*_library_caches(), *_library_finalizers()]
    # Through JAX's and lift's own objects only: a user's object on the way
    # (a closure in a treedef's static data) is the user's holding. A tracer
    # of a trace JAX's checker never looks at (eager `jvp`; `grad` before jax
    # 0.11) may be reached through the user's function JAX keeps as a cache's
    # key (a `jit` of a closure over it, inside an eager `grad`): JAX's
    # checker passes that, and so does this.
    strict = _reached(tracers, caches, names, through_users=False)
    rest = [t for t in tracers if id(t) not in strict]
    unchecked = [t for t in rest if not jax_checks(t)]
    loose = _reached(unchecked, caches, names, through_users=True)
    rest = [t for t in rest if id(t) not in loose]
    return (CacheHolders(tuple(names)) if names else None), rest


def _reached(
    tracers: list[Any],
    caches: list[tuple[str, Any]],
    names: dict[str, None],
    through_users: bool,
) -> set[int]:
    """The ids of `tracers` that `caches` reach; each cache that does is added
    to `names`.

    Caches' contents are read as the garbage collector sees them, iteratively
    and bounded. The walk goes through the user's objects only with
    `through_users`."""
    wanted = {id(t) for t in tracers}
    reached: set[int] = set()
    if not wanted:
        return reached
    # Not through a function's globals: a module is not the cache's content.
    seen = {id(getattr(m, "__dict__", None)) for m in list(sys.modules.values())}

    def referents(obj: Any) -> list[Any] | None:
        # Each object opened once over all the caches, and at most
        # `_CACHE_OBJECTS` of them.
        if id(obj) in seen or len(seen) >= _CACHE_OBJECTS or type(obj) in UNOPENED:
            return None
        if not through_users and _users_object(obj):
            return None
        seen.add(id(obj))
        return gc.get_referents(obj)

    with _gc.paused():
        for label, cache in caches:
            for obj in reach([cache], referents):
                if id(obj) in wanted:  # and walked on: a tracer holds others
                    reached.add(id(obj))
                    names[label] = None
    return reached
