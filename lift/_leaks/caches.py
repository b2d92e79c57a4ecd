"""Escaped tracers that no root reaches: the closure holding one, found from
its referrers, and those kept only by libraries' caches (JAX's, `functools`'s)
and finalizers, named as such: retained, but not stored by the code under test."""

from __future__ import annotations

import gc
import sys
import types
import weakref
from collections.abc import Iterable
from typing import Any, NamedTuple, cast

from .._base import gc as _gc
from .._compat import is_user_code
from .reach import ATOMIC
from .report import Leak, closure_leak

__all__ = [
    "CacheHolders",
    "cache_holders",
    "closure_holding",
    "holder_kinds",
    "split_cached",
]


def closure_holding(tracer: Any) -> Leak | None:
    """The report for an escaped tracer that no root reaches, when a closure
    holds it: the function, its variable and its line, found from the tracer's
    referrers (cell, closure, function). `None` if no function holds it.

    Costs a few passes over the heap (`gc.get_referrers`): only for tracers
    known to have escaped."""
    with _gc.paused():
        for cell in gc.get_referrers(tracer):
            if type(cell) is not types.CellType:
                continue
            for closure in gc.get_referrers(cell):
                if type(closure) is not tuple:
                    continue
                for fn in gc.get_referrers(closure):
                    if type(fn) is types.FunctionType and fn.__closure__ is closure:
                        return closure_leak(fn, closure.index(cell), tracer)
    return None


def holder_kinds(tracers: list[Any], mine: Iterable[Any] = ()) -> list[str]:
    """The kinds of object that hold `tracers` directly (`jaxlib...PyTreeDef`,
    `tuple`), for a report that cannot name a variable: what lift could not
    look inside, named rather than skipped. `mine`: the caller's own lists."""
    ignore = {id(tracers), *map(id, mine)}
    kinds: dict[str, None] = {}
    with _gc.paused():
        refs = [r for r in gc.get_referrers(*tracers) if id(r) not in ignore]
        ignore.add(id(refs))
        for ref in refs:
            if type(ref) is types.FrameType:
                continue
            # A tuple, list, dict or cell says little: what holds it says more.
            if type(ref) in _PLAIN_HOLDERS:
                outer = [r for r in gc.get_referrers(ref) if id(r) not in ignore]
                ref = next((r for r in outer if type(r) is not types.FrameType), ref)
            t: type[Any] = type(ref)  # pyright: ignore[reportUnknownVariableType]
            kinds[f"{t.__module__}.{t.__qualname__}".removeprefix("builtins.")] = None
    return list(kinds)


_PLAIN_HOLDERS: frozenset[type] = frozenset({tuple, list, dict, types.CellType})


#: The most objects `cache_holders` visits inside libraries' caches.
_CACHE_OBJECTS = 2_000_000


class CacheHolders(NamedTuple):
    """Escaped tracers that no variable of the user's reaches, kept alive by
    libraries' caches (JAX's: `jax._src.pjit._infer_params_cached`, ...):
    retained, but not stored by the code under test. `names`: those caches."""

    names: tuple[str, ...]

    def __str__(self) -> str:
        shown = ", ".join(self.names[:4])
        more = f" and {len(self.names) - 4} more" if len(self.names) > 4 else ""
        return (
            f"held by the libraries' caches {shown}{more}, not stored by the code "
            "under test (a cache is emptied by its cache_clear(), most of JAX's "
            "by jax.clear_caches(); a finalizer holds until its object dies)"
        )


def _library_caches() -> list[tuple[str, Any]]:
    """The module-level caches of libraries (objects with `cache_clear`: JAX's
    `weakref_lru_cache`s and `util.cache()` functions, `functools.lru_cache`s),
    each named once."""
    out: dict[int, tuple[str, Any]] = {}
    for name, module in list(sys.modules.items()):
        filename = getattr(module, "__file__", None)
        attrs: Any = getattr(module, "__dict__", None)
        if not isinstance(filename, str) or is_user_code(filename):
            continue
        if not isinstance(attrs, dict):
            continue
        items: list[tuple[str, Any]] = list(cast(dict[str, Any], attrs).items())
        for key, value in items:
            if id(value) in out or isinstance(value, type):
                continue
            clear = getattr(type(value), "cache_clear", None)  # pyright: ignore[reportUnknownArgumentType]
            if clear is None and type(value) is types.FunctionType:
                # A function wrapping a cache, its `cache_clear` its own (JAX's
                # `util.cache()`): read from its `__dict__`, no property run.
                clear = value.__dict__.get("cache_clear")
            if callable(clear):
                inner = getattr(value, "__wrapped__", value)
                where = getattr(inner, "__module__", None)
                what = getattr(inner, "__qualname__", None)
                label = f"{where}.{what}" if where and what else f"{name}.{key}"
                out[id(value)] = (label, value)
    return sorted(out.values(), key=lambda c: c[0])


def _library_finalizers() -> list[tuple[str, Any]]:
    """The pending `weakref.finalize` callbacks that libraries registered (JAX
    registers one per constant a trace stages, holding the trace): what each
    will call and with what, named by the callback. Kept alive by
    `weakref.finalize`'s own registry, which no variable reaches."""
    registry: Any = getattr(weakref.finalize, "_registry", None)
    if not isinstance(registry, dict):
        return []
    out: dict[str, list[Any]] = {}
    for finalizer in list(cast(dict[Any, Any], registry)):
        try:
            info = finalizer.peek()
        except Exception:  # not a finalizer as the standard library makes them
            continue
        if info is None:
            continue
        _, func, args, kwargs = info
        inner = getattr(func, "__func__", func)
        code = getattr(inner, "__code__", None)
        if not isinstance(code, types.CodeType) or is_user_code(code.co_filename):
            continue  # the user's own finalizer: its holdings are the user's
        what = getattr(inner, "__qualname__", None) or type(inner).__qualname__
        label = f"{getattr(inner, '__module__', None)}.{what} (a pending finalizer)"
        out.setdefault(label, []).append((func, args, kwargs))
    return sorted(out.items())


def cache_holders(tracers: list[Any]) -> CacheHolders | None:
    """The libraries' caches that reach `tracers` (escaped tracers no variable
    of the user's reaches: lift's scan does not open JAX's C caches), when they
    reach every one of them; else `None`."""
    names, rest = split_cached(tracers)
    return names if names is not None and not rest else None


def split_cached(tracers: list[Any]) -> tuple[CacheHolders | None, list[Any]]:
    """The libraries' caches that reach some of `tracers` (or `None`), and the
    tracers they do not reach.

    Walks each cache's contents as the garbage collector sees them
    (`gc.get_referents`), iteratively and bounded: only for tracers known to
    have escaped."""
    wanted = {id(t) for t in tracers}
    if not wanted:
        return None, []
    names: dict[str, None] = {}
    reached: set[int] = set()
    seen: set[int] = set()
    # Not through a function's globals: a module is not the cache's content.
    seen.update(id(getattr(m, "__dict__", None)) for m in list(sys.modules.values()))
    with _gc.paused():
        for label, cache in [*_library_caches(), *_library_finalizers()]:
            stack = [cache]
            while stack and len(seen) < _CACHE_OBJECTS:
                obj = stack.pop()
                for child in gc.get_referents(obj):
                    key = id(child)
                    if key in wanted:  # and walked on: a tracer holds others
                        reached.add(key)
                        names[label] = None
                    if key not in seen and type(child) not in ATOMIC:
                        seen.add(key)
                        stack.append(child)
    rest = [t for t in tracers if id(t) not in reached]
    return (CacheHolders(tuple(names)) if names else None), rest
