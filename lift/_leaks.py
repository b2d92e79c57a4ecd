"""The leak scan: find tracers that outlived the transform that made them.

The walk starts from the given roots and follows what Python code can reach:
function cells, defaults, bound `self`, `functools.partial` arguments, the module
globals a function's code names, `Lifted` captures, pytree children, containers,
objects' `__dict__` and `__slots__`, class attributes, and the constants of
traced programs. It is iterative (closures nest 10 000 deep), breadth-first (so
each leak is named by its shortest path), visits each object once (cycles are
fine) and stops after a bounded number of objects. What it cannot open (an
attribute, `__dict__` or iteration that raises) it names (`Unopened`): after
the leaks in a `LeakError`'s report, and in `find_leaks(...).unopened`; never
as an error of its own, so that a clean scan passes.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import gc
import os
import sys
import sysconfig
import types
import weakref
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, cast

import jax
import numpy as np

from . import _compat, _gc
from ._closure import (
    builtin_method_parts,
    cells,
    class_parts,
    function_of,
    function_parts,
    holder_of,
    instance_class,
    method_parts,
    partial_parts,
    slot_names,
)
from ._errors import LeakError
from ._hidden import aux_parts
from ._labels import ARG, CELL, KEYWORD, SELF, Label
from ._stdlib_holders import (
    LRU_WRAPPER,
    STDLIB_HOLDERS,
    SUSPENDED_FRAMES,
    array_items,
    cache_parts,
    opened_by_referents,
    referent_parts,
    suspended_parts,
)
from ._trees import one_level

# jax.tree_util, typed once for the type checker.
_tree_leaves: Callable[..., list[Any]] = jax.tree_util.tree_leaves
_flatten_with_path: Callable[..., tuple[list[tuple[Any, Any]], Any]]
_flatten_with_path = jax.tree_util.tree_flatten_with_path  # pyright: ignore
_keystr: Callable[[Any], str] = jax.tree_util.keystr  # pyright: ignore
_Array: type[Any] = jax.Array

__all__ = ["Leak", "Leaks", "check_leaks", "find_leaks"]

#: Default bound on the number of objects one scan visits.
DEFAULT_LIMIT = 2_000_000

_CAPTURED = "captured variable"
_DEFAULT = "default of parameter"
_GLOBAL = "global variable"
_SELF = "bound object"
_PARTIAL = "partial argument"
_ATTRIBUTE = "function attribute"
_LOCAL_KIND = "local variable of a suspended generator"
_FRAME_LOCAL = "local variable"  # of a running frame, when a trace exited
_STORED_LIFTED = "lifted function"
_STATIC_FIELD = "static pytree data"


_MODULE_GLOBAL = "module global"  # a module's variable, a module given as root

_ABSENT: Any = object()
_STORED = frozenset({_STORED_LIFTED, _STATIC_FIELD})  # holders already pytrees
_MARKERS = _STORED | {_MODULE_GLOBAL}  # edges that name no holding function
_REGISTRIES = frozenset({_GLOBAL, _MODULE_GLOBAL})  # module-level storage


def _stored_advice(holder: Any, how: str | None) -> str:
    """Advice for a tracer whose holder is already a pytree's own data."""
    if how == _STORED_LIFTED:
        name = getattr(holder, "__qualname__", None) or "the function"
        return (
            f"{name} is already lifted (its captures are traced), but it was "
            "stored where it outlives the transform: return it from the "
            "transformed function instead of storing it"
        )
    return (
        f"static data of {type(holder).__qualname__} is not traced: return the "
        "value from the transformed function instead of storing it in a static "
        "field, or make the field a pytree node"
    )


@dataclasses.dataclass(frozen=True)
class Leak:
    """A tracer reachable from the scanned roots after its transform has exited.

    **Attributes:**

    - `path`: how the tracer is reached, from the root, e.g. `STASH[0].x`.
    - `function`: qualified name of the innermost function holding the tracer
      (through a captured variable, a default, a bound object, a partial
      argument, or a global its code names), or `None`.
    - `variable`: the name under which that function holds it, or `None`.
    - `filename`, `lineno`: where that function is defined, or `None`.
    - `tracer`: shape, dtype and transform of the tracer: `float32[] from jit(step)`.
    - `kind`: how the function holds it (`"captured variable"`, `"default of
      parameter"`, `"global variable"`, `"bound object"`, `"partial argument"`),
      or `None`.
    - `location`: the path to the holding function, or `None` when it is the root.

    `str(leak)` is the one-line report, with the fix.

    ```python
    import jax
    import lift

    def make(x):
        def scaled(y):
            return x * y

        return scaled

    saved = []
    jax.jit(lambda x: saved.append(make(x)) or x)(1.0)
    (leak,) = lift.find_leaks(saved)
    print(leak.function, leak.variable, leak.tracer)
    ```

    ```text
    make.<locals>.scaled x float32[] from jit(<lambda>)
    ```
    """

    path: str
    function: str | None
    variable: str | None
    filename: str | None
    lineno: int | None
    tracer: str
    kind: str | None = None
    location: str | None = None
    detail: str | None = None
    advice: str | None = None

    @property
    def hint(self) -> str:
        """What to do about this leak, as code where possible."""
        if self.advice is not None:
            return self.advice
        var = self.variable
        if self.kind == _CAPTURED:
            return f"lift the function or pass {var} as an argument"
        if self.kind == _DEFAULT:
            return f"pass {var} as an argument instead of a default value"
        if self.kind == _GLOBAL:
            return (
                f"return the value from the transformed function instead of "
                f"storing it in {var}"
            )
        if self.kind == _SELF:
            return (
                "lift the method (`lift.lift(obj.method)`) or pass obj as an argument"
            )
        if self.kind == _PARTIAL:
            return f"lift the partial (`lift.lift(p)`) or pass {var} as an argument"
        if self.kind == _ATTRIBUTE:
            return f"lift the function or pass {var} as an argument"
        if self.kind == _FRAME_LOCAL:
            return (
                "return the value from the transformed function instead of "
                f"keeping it in {var}, which outlives the transform"
            )
        return "return the value from the transformed function instead of storing it"

    def __str__(self) -> str:
        if self.function is None:
            return f"{self.path}: {self.tracer} — {self.hint}"
        where = f"{self.function} ({self.filename}:{self.lineno})"
        if self.kind == _GLOBAL:
            return (
                f"{self.path}: {self.tracer}, in global '{self.variable}' used by "
                f"{where} — {self.hint}"
            )
        at = f" at {self.detail}" if self.detail else ""
        head = f"{self.location} -> " if self.location else ""
        return (
            f"{head}{where}, {self.kind} '{self.variable}'{at}: {self.tracer} — "
            f"{self.hint}"
        )


class Unopened(NamedTuple):
    """A holder the scan could not look inside: a tracer there is not seen.

    `path`: how it is reached from the root (`state.model`); `error`: what
    opening it raised (`RuntimeError: no dict`)."""

    path: str
    error: str

    def __str__(self) -> str:
        return f"could not open {self.path}: {self.error}"


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 200 else f"{text[:199]}…"


#: At most this many unopened holders are listed in one report.
_UNOPENED_SHOWN = 5


def unopened_text(unopened: Iterable[Unopened]) -> str:
    """The lines naming what a scan could not open (empty when nothing)."""
    items = list(dict.fromkeys(unopened))
    if not items:
        return ""
    lines = [f"  {u}" for u in items[:_UNOPENED_SHOWN]]
    if len(items) > _UNOPENED_SHOWN:
        lines.append(f"  (and {len(items) - _UNOPENED_SHOWN} more)")
    return (
        f"{len(items)} holder(s) could not be opened, so a tracer inside "
        "is not seen (make the attribute readable, or scan its parts "
        "yourself):\n" + "\n".join(lines)
    )


class Leaks(list[Leak]):
    """What `find_leaks` returns: a list of [`lift.Leak`][], and `unopened`,
    the holders the scan could not open (a tracer inside them is not seen),
    each with its path and the error opening it raised.

    ```python
    import lift

    class Guarded:
        @property
        def __dict__(self):
            raise RuntimeError("locked")

    found = lift.find_leaks(Guarded())
    assert isinstance(found, lift.Leaks) and found == []
    print(len(found.unopened))
    ```

    ```text
    1
    ```
    """

    unopened: tuple[Unopened, ...] = ()


def find_leaks(*roots: Any, limit: int = DEFAULT_LIMIT) -> Leaks:
    """Every tracer reachable from `roots` whose transform has already exited.

    **Arguments:**

    - `*roots`: anything: functions, `Lifted`, pytrees, objects, modules.
    - `limit`: the most objects one scan visits; a graph larger than that is
      scanned only in part (breadth-first, so the closest objects first).

    **Returns:**

    A list of [`lift.Leak`][], one per escaped tracer, in breadth-first order.
    Tracers of transforms still running (a scan from inside `jit`) are not leaks.

    ```python
    import jax
    import lift

    STASH = []

    @jax.jit
    def step(x):
        STASH.append(x)
        return x * 2

    step(1.0)
    (leak,) = lift.find_leaks(step)
    print(leak.path, leak.variable, leak.tracer)
    ```

    ```text
    STASH[0] STASH float32[] from jit(step)
    ```

    An object the scan cannot look inside (an attribute, `__dict__` or
    iteration that raises) is named in the result's `unopened`, each with its
    path and error (`could not open roots[0].__dict__: RuntimeError: …`).
    """
    unopened: list[Unopened] = []
    leaks = Leaks(_find(roots, limit, unopened))
    leaks.unopened = tuple(dict.fromkeys(unopened))
    return leaks


def _find(roots: tuple[Any, ...], limit: int, unopened: list[Unopened]) -> list[Leak]:
    named = [(_root_label(root, i), root) for i, root in enumerate(roots)]
    # By name (stable): a tracer two roots reach at the same depth is named
    # from the same one whatever the order they were given in.
    named.sort(key=lambda pair: pair[0])
    return scan(named, limit, unopened=unopened)


def check_leaks(*roots: Any, limit: int = DEFAULT_LIMIT) -> None:
    """Raise [`lift.LeakError`][] if a tracer reachable from `roots` has escaped.

    **Arguments:** as [`lift.find_leaks`][].

    **Returns:** `None` when nothing escaped.

    **Raises:** `lift.LeakError`, listing each leak with its function, `file:line`,
    variable and the fix, then what the scan could not open (with no leak,
    `find_leaks(...).unopened` names that).

    ```python
    import jax
    import lift

    lift.check_leaks(jax.numpy.ones(3), lambda x: x)  # nothing escaped: no error
    ```
    """
    __tracebackhide__ = True
    unopened: list[Unopened] = []
    leaks = _find(roots, limit, unopened)
    if leaks:
        raise LeakError(format_leaks(leaks, unopened), anchor="leak-report")


_UNSEEN_HOLDER = (
    "held by no variable lift can see: by JAX (a returned pytree's static "
    "data) or a C extension (atexit)"
)


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
                        return _closure_leak(fn, closure.index(cell), tracer)
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
        if not isinstance(filename, str) or is_user_file(filename):
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
        if not isinstance(code, types.CodeType) or is_user_file(code.co_filename):
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
                    if key not in seen and type(child) not in _ATOMIC:
                        seen.add(key)
                        stack.append(child)
    rest = [t for t in tracers if id(t) not in reached]
    return (CacheHolders(tuple(names)) if names else None), rest


def _closure_leak(fn: types.FunctionType, index: int, tracer: Any) -> Leak:
    code = fn.__code__
    variable = code.co_freevars[index]
    return Leak(
        f"<{_UNSEEN_HOLDER}>",
        fn.__qualname__,
        variable,
        code.co_filename,
        code.co_firstlineno,
        f"{_compat.tracer_aval(tracer)} from {_compat.transform_name(tracer)}",
        _CAPTURED,
        f"<{_UNSEEN_HOLDER}>",
        None,
        "return the value from the transformed function instead of keeping a "
        "closure over it (a static field of a returned pytree is not traced: "
        "make it a pytree node)",
    )


def format_leaks(leaks: Iterable[Leak], unopened: Iterable[Unopened] = ()) -> str:
    """The text of a `LeakError`: one line per leak, then what the scan could
    not open (where another tracer may be)."""
    lines = [str(leak) for leak in leaks]
    what = "tracer escaped the transform that created it"
    if len(lines) != 1:
        what = "tracers escaped the transforms that created them"
    body = "\n".join(f"  {line}" for line in lines)
    more = unopened_text(unopened)
    return f"{len(lines)} {what}:\n{body}" + (f"\n{more}" if more else "")


def _root_label(root: Any, index: int) -> str:
    kind: type[Any] = type(root)  # pyright: ignore[reportUnknownVariableType]
    if issubclass(kind, types.ModuleType):
        return root.__name__
    if kind is types.FunctionType:
        return root.__qualname__
    if function_of(root) is not None:
        return getattr(root, "__qualname__", f"roots[{index}]")
    return f"roots[{index}]"


# ----------------------------------------------------------------------------
# The walk.


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {
        paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths
    }
    dirs.add(os.path.dirname(os.path.abspath(__file__)))
    dirs.add(os.path.dirname(os.path.abspath(os.__file__)))
    return tuple(sorted(os.path.join(os.path.abspath(d), "") for d in dirs))


_LIBRARY_DIRS = _library_dirs()


@functools.lru_cache(maxsize=256)
def is_user_file(filename: str) -> bool:
    """Whether code from `filename` is the user's (not the stdlib, site-packages
    or lift): only the user's functions have their globals and frames scanned."""
    if filename.startswith("<"):
        return True  # exec'd or interactive code is the user's
    return not os.path.abspath(filename).startswith(_LIBRARY_DIRS)


# Standard-library objects a user stores things in (`SimpleNamespace`,
# `argparse.Namespace`, `threading.local`, ...) are opened like the user's own;
# JAX's, NumPy's, pytest's, lift's and the builtins' (exceptions and their
# tracebacks) are not.
_CLOSED_MODULES = frozenset(
    {"jax", "jaxlib", "numpy", "builtins", "ml_dtypes", "lift", "_pytest", "pytest"}
)


def _is_closed_type(cls: type) -> bool:
    module = getattr(cls, "__module__", None) or "builtins"
    return module.partition(".")[0] in _CLOSED_MODULES


_ATOMIC: frozenset[type] = frozenset(
    {
        str,
        bytes,
        bytearray,
        int,
        float,
        complex,
        bool,
        type(None),
        type(Ellipsis),
        type(NotImplemented),
        range,
        slice,
        types.ModuleType,
        types.CodeType,
        types.FrameType,
        types.TracebackType,
        types.MethodWrapperType,
        types.WrapperDescriptorType,
        types.MethodDescriptorType,
        types.GetSetDescriptorType,
        types.MemberDescriptorType,
        np.dtype,
    }
)


def _code_names(
    code: types.CodeType, cache: dict[types.CodeType, tuple[str, ...]]
) -> tuple[str, ...]:
    """Global names a code object (and the code nested in it) refers to."""
    found = cache.get(code)
    if found is not None:
        return found
    names: dict[str, None] = {}
    stack = [code]
    while stack:
        c = stack.pop()
        names.update(dict.fromkeys(c.co_names))
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    found = tuple(names)
    cache[code] = found
    return found


def _param_name(fn: Any, index: int) -> str:
    code = getattr(fn, "__code__", None)
    if isinstance(code, types.CodeType) and index < code.co_argcount:
        return code.co_varnames[index]
    return f"args[{index}]"


# Labels are rendered only for reports: an entry stores (format, key).
_INDEX = "[{}]"
_KEY = "[{!r}]"
_ATTR = ".{}"
_SET_ITEM = "{{…}}"

# Per-type plans for objects that are not one of the core kinds.
_SKIP, _LIFTED, _CONTAINER, _JAXPR, _PYTREE, _OBJECT, _LIBRARY = range(7)

_Label = str | tuple[str, Any] | Label


def _label_text(label: _Label) -> str:
    if isinstance(label, str):
        return label
    if isinstance(label, Label):
        return label.text
    fmt, key = label
    return fmt.format(key)


class _Walk:
    """One breadth-first scan; each entry remembers its parent and its label."""

    def __init__(
        self,
        limit: int,
        only: frozenset[int] | None = None,
        skip: frozenset[int] = frozenset(),
        home: str | None = None,
        live: Any = None,
    ) -> None:
        self.limit = limit
        self.only = only  # ids of the tracers to report (JAX's report), or all
        self.skip = skip  # ids of tracers not to report (escaped before)
        self.tracers: list[Any] = []  # the tracer of each leak, in order
        # What is live, or (`only` known to have escaped) `_NONE_LIVE`.
        self.live: Any = _compat.live_traces() if live is None else live
        self.stop = False  # whether to stop once every one of `only` is found
        self.seen: set[int] = set()
        self.keep: list[Any] = []  # temporaries built by the walk keep their ids
        # (parent entry, label, (function, variable, kind) or None, path restarts)
        self.entries: list[
            tuple[int, _Label, tuple[Any, str | None, str | None] | None, bool]
        ] = []
        self.queue: collections.deque[tuple[Any, int]] = collections.deque()
        self.leaks: list[Leak] = []
        self.code_names: dict[types.CodeType, tuple[str, ...]] = {}
        self.cell_labels: dict[types.CodeType, tuple[Label, ...]] = {}
        self.plain: set[type] = set()  # classes whose instances hold a __dict__
        self.plans: dict[type, tuple[int, tuple[str, ...]]] = {}
        self.home = home
        # What could not be opened: (entry, what was being read, the error).
        self.failed: list[tuple[int, str, BaseException]] = []

    def push(
        self,
        obj: Any,
        parent: int,
        label: _Label,
        edge: tuple[Any, str | None, str | None] | None = None,
        reset: bool = False,
    ) -> None:
        if type(obj) in _ATOMIC:
            return
        key = id(obj)
        if key in self.seen:
            return
        self.seen.add(key)
        entries = self.entries
        entries.append((parent, label, edge, reset))
        self.queue.append((obj, len(entries) - 1))

    def push_all(self, items: Iterable[tuple[Any, Any]], parent: int, fmt: str) -> None:
        """Push `(key, value)` pairs labelled `fmt.format(key)`: the hot loop."""
        atomic, seen, entries, queue = _ATOMIC, self.seen, self.entries, self.queue
        for key, value in items:
            if type(value) in atomic:
                continue
            i = id(value)
            if i in seen:
                continue
            seen.add(i)
            entries.append((parent, (fmt, key), None, False))
            queue.append((value, len(entries) - 1))

    def run(self) -> list[Leak]:
        visited, limit = 0, self.limit
        queue, entries, seen = self.queue, self.entries, self.seen
        popleft, append, add = queue.popleft, queue.append, seen.add
        atomic, plain = _ATOMIC, self.plain
        tracer_type = _compat.Tracer
        expand = self.expand
        only, skip = self.only, self.skip
        while queue and visited < limit:
            obj, index = popleft()
            visited += 1
            cls = type(obj)  # pyright: ignore[reportUnknownVariableType]
            # Lists, tuples and dicts, the most common objects, are walked here
            # (as `push_all` would): a call less per object.
            if cls is list or cls is tuple:
                items, fmt = enumerate(obj), _INDEX  # pyright: ignore[reportUnknownArgumentType]
            elif cls is dict:
                items, fmt = obj.items(), _KEY  # pyright: ignore[reportUnknownVariableType]
            elif cls in plain:
                items, fmt = obj.__dict__.items(), _ATTR  # pyright: ignore[reportUnknownVariableType]
            else:
                if issubclass(cls, tracer_type):  # pyright: ignore[reportUnknownArgumentType]
                    if (
                        (only is None or id(obj) in only)
                        and id(obj) not in skip
                        and not self.live.is_live(obj)
                    ):
                        self.leaks.append(self.report(obj, index))
                        self.tracers.append(obj)
                        if self.stop and len(self.tracers) == len(only or ()):
                            break  # all found, each by its shortest path
                    continue
                try:
                    expand(obj, index)
                except Exception as exc:  # a proxy whose attributes fail: named
                    self.failed.append((index, "", exc))
                continue
            for key, value in items:  # pyright: ignore[reportUnknownVariableType]
                if type(value) in atomic:  # pyright: ignore[reportUnknownArgumentType]
                    continue
                i = id(value)  # pyright: ignore[reportUnknownArgumentType]
                if i in seen:
                    continue
                add(i)
                append((value, len(entries)))
                entries.append((index, (fmt, key), None, False))
        return self.leaks

    # -- children of each kind of object --------------------------------------

    def expand(self, obj: Any, index: int) -> None:
        cls: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
        if cls is list or cls is tuple:
            self.push_all(enumerate(obj), index, _INDEX)  # pyright: ignore
        elif cls is dict:
            self.push_all(obj.items(), index, _KEY)
        elif cls is types.FunctionType:
            self.function(obj, index)
        elif cls is types.MethodType:
            self.method(obj, index)
        elif cls is functools.partial or (
            issubclass(cls, functools.partial) and not self.is_lifted(obj)  # pyright: ignore[reportUnknownArgumentType]
        ):
            # `jax.tree_util.Partial` too: its arguments named as a partial's.
            self.partial(obj, index)
        elif cls is types.CellType:
            try:
                self.push(obj.cell_contents, index, ".cell_contents")
            except ValueError:
                pass
        elif isinstance(obj, type):
            self.parts(class_parts(obj), index)  # pyright: ignore[reportUnknownArgumentType]
        elif cls is np.ndarray:
            self.parts(array_items(obj), index)  # NumPy object arrays
        elif cls is types.BuiltinMethodType:
            self.parts(builtin_method_parts(obj), index)  # `stash.append`: `stash`
        elif cls in SUSPENDED_FRAMES:
            self.suspended(obj, index)
        elif cls in STDLIB_HOLDERS:
            self.parts(STDLIB_HOLDERS[cls](obj), index)
        elif (holder := holder_of(obj)) is not None:
            # A `lift.jit` function: the function it wraps, already lifted, as
            # lift's closure graph takes it (flattened, it would be lifted
            # afresh at every visit: a `lift.jit` closure that calls itself
            # then without end).
            for label, part in holder.parts(obj):
                self.push(part, index, label, (obj, None, _STORED_LIFTED))
        elif cls is LRU_WRAPPER:
            parts = cache_parts(obj)
            self.keep.append(parts)
            self.parts(parts, index)
        elif issubclass(cls, weakref.ReferenceType):  # pyright: ignore[reportUnknownArgumentType]
            # `weakref.ref`, `WeakMethod`: what it refers to, while alive (a
            # tracer there is held by something else, reached through this).
            self.push(obj(), index, "()")
        elif issubclass(cls, BaseException):  # pyright: ignore[reportUnknownArgumentType]
            self.exception(obj, cls, index)  # pyright: ignore[reportUnknownArgumentType]
        else:
            self.other(obj, cls, index)  # pyright: ignore[reportUnknownArgumentType]

    def exception(self, exc: BaseException, cls: type, index: int) -> None:
        """A kept exception's arguments, attributes, notes and the exceptions it
        chains; not its traceback (the frames it unwound, whose locals are the
        running code's, not data the error was given)."""
        self.push(exc.args, index, ".args")
        self.push(exc.__cause__, index, ".__cause__")
        self.push(exc.__context__, index, ".__context__")
        if _is_closed_type(cls):  # a builtin error: its own attributes only
            attrs = self.attribute(exc, "__dict__", index)
            if isinstance(attrs, dict):
                self.push_all(attrs.items(), index, _ATTR)  # pyright: ignore
        else:
            self.other(exc, cls, index)

    def parts(self, parts: Iterable[tuple[Label, Any]], index: int) -> None:
        """Push a holder's parts, as `lift._closure` describes them."""
        for label, value in parts:
            self.push(value, index, label)

    def suspended(self, gen: Any, index: int) -> None:
        """A suspended generator's (or coroutine's) local variables."""
        frame = getattr(gen, SUSPENDED_FRAMES[type(gen)])
        if frame is None:  # finished: it holds nothing
            return
        code = frame.f_code
        for label, value in suspended_parts(gen):
            self.push(value, index, label, (code, label.variable, _LOCAL_KIND))

    def is_lifted(self, obj: Any) -> bool:
        return function_of(obj) is not None

    def function(self, fn: types.FunctionType, index: int) -> None:
        code = fn.__code__
        if fn.__closure__:
            labels = self.cell_labels.get(code)
            if labels is None:
                labels = self.cell_labels[code] = tuple(
                    Label.of(CELL, name) for name in code.co_freevars
                )
            for label, cell in cells(fn, labels):
                try:
                    value = cell.cell_contents
                except ValueError:  # an empty cell: the variable is not bound yet
                    continue
                self.push(value, index, label, (fn, label.variable, _CAPTURED))
        if fn.__defaults__ or fn.__kwdefaults__ or fn.__dict__:
            for label, value in function_parts(fn):
                self.push(value, index, label, (fn, label.variable, label.role))
        if is_user_file(code.co_filename):
            glob = fn.__globals__
            names = _code_names(code, self.code_names)
            for name in names:
                if name in glob:
                    value = glob[name]
                    if type(value) is types.ModuleType:
                        self.module_names(value, name, names, fn, index)
                    else:
                        self.push(value, index, name, (fn, name, _GLOBAL), reset=True)

    def module_names(
        self,
        module: types.ModuleType,
        alias: str,
        names: tuple[str, ...],
        fn: types.FunctionType,
        index: int,
    ) -> None:
        """The attributes of a module that `fn`'s code names (`mylib.step`,
        `pkg.mod.step` through `import pkg.mod`): what the function reaches
        through the module, walked as its globals. A module is not walked whole
        (JAX's and NumPy's are vast); its names the code does not use are
        reached, if at all, from what it does use."""
        stack = [(module, alias)]
        done = {id(module)}
        while stack:
            mod, prefix = stack.pop()
            attrs = vars(mod)
            for name in names:
                value = attrs.get(name, _ABSENT)
                if value is _ABSENT:
                    continue
                where = f"{prefix}.{name}"
                if type(value) is types.ModuleType:
                    if id(value) not in done:
                        done.add(id(value))
                        stack.append((value, where))
                    continue
                self.push(value, index, where, (fn, where, _GLOBAL), reset=True)

    def partial(self, p: functools.partial[Any], index: int) -> None:
        func = p.func
        for label, value in partial_parts(p):
            if label.kind == ARG:
                edge = (func, _param_name(func, cast(int, label.key)), _PARTIAL)
            elif label.kind == KEYWORD:
                edge = (func, label.variable, _PARTIAL)
            else:
                edge = None
            self.push(value, index, label, edge)

    def method(self, m: types.MethodType, index: int) -> None:
        fn = m.__func__
        for label, value in method_parts(m):
            edge = (fn, "self", _SELF) if label.kind == SELF else None
            self.push(value, index, label, edge)

    def plan(self, obj: Any, cls: type) -> tuple[int, tuple[str, ...], bool]:
        """How to walk objects of type `cls`, and whether that holds for every
        instance (decided once per type and scan when it does)."""
        if function_of(obj) is not None:
            return _LIFTED, (), True
        if issubclass(
            cls,
            dict
            | list
            | tuple
            | set
            | frozenset
            | collections.deque
            | types.MappingProxyType,
        ):
            return _CONTAINER, (), True
        if _compat.holds_consts(obj):
            return _JAXPR, (), True
        if isinstance(obj, _Array | np.generic):
            return _SKIP, (), True
        try:
            leaves = _tree_leaves(obj, is_leaf=one_level(obj))
        except Exception:
            # This instance does not flatten (a `lift.jit` function whose
            # captures cannot): walked as an object, and the type's other
            # instances decided by themselves, so that the report does not
            # depend on which instance the walk met first.
            return (*self.as_object(cls), False)  # pyright: ignore[reportUnknownArgumentType]
        if not (len(leaves) == 1 and leaves[0] is obj):
            return _PYTREE, (), True
        return (*self.as_object(cls), True)  # pyright: ignore[reportUnknownArgumentType]

    def as_object(self, cls: type) -> tuple[int, tuple[str, ...]]:
        if _is_closed_type(cls):  # pyright: ignore[reportUnknownArgumentType]
            return _LIBRARY, ()
        return _OBJECT, slot_names(cls)  # pyright: ignore[reportUnknownArgumentType]

    def other(self, obj: Any, cls: type, index: int) -> None:
        plan = self.plans.get(cls)
        if plan is None:
            kind, slots, stable = self.plan(obj, cls)
            plan = (kind, slots)
            if stable:
                self.plans[cls] = plan
            if kind == _OBJECT:
                # The class attributes its instances read: walked once, named
                # from the first instance met.
                self.parts(instance_class(cls), index)
                if (
                    stable
                    and not slots
                    and not callable(cast(object, obj))
                    and cls.__getattribute__ is object.__getattribute__
                    and type(self.attribute(obj, "__dict__", index)) is dict
                ):
                    self.plain.add(cls)  # walked in `run`: its `__dict__` only
        kind, slots = plan
        if kind in (_OBJECT, _LIBRARY):
            self.walk_object(obj, cls, index, kind, slots)
        elif kind == _PYTREE:
            try:
                children, treedef = _flatten_with_path(obj, is_leaf=one_level(obj))
            except Exception:  # this instance does not flatten: an object
                self.walk_object(obj, cls, index, *self.as_object(cls))
                return
            self.keep.append(children)
            for path, child in children:
                self.push(child, index, _keystr(path))
            for label, aux in aux_parts(treedef):
                self.keep.append(aux)
                self.push(aux, index, label, (obj, None, _STATIC_FIELD))
        else:
            self.walk_kind(obj, index, kind)

    def walk_object(
        self, obj: Any, cls: type, index: int, kind: int, slots: tuple[str, ...]
    ) -> None:
        """An object's `__wrapped__`, and unless a library's, its attributes and
        slots (a C iterator, `map`, `itemgetter`: what it holds)."""
        if callable(obj):
            wrapped = self.attribute(obj, "__wrapped__", index)
            if wrapped is not None:
                self.push(wrapped, index, ".__wrapped__")
        if opened_by_referents(cls):
            parts = list(referent_parts(obj))
            self.keep.append(parts)
            self.parts(parts, index)
            return
        if kind == _LIBRARY:
            return
        attrs = self.attribute(obj, "__dict__", index)
        if isinstance(attrs, dict):
            self.push_all(attrs.items(), index, _ATTR)  # pyright: ignore
        for name in slots:
            value = self.attribute(obj, name, index, _ABSENT)
            if value is not _ABSENT:
                self.push(value, index, (_ATTR, name))

    def attribute(self, obj: Any, name: str, index: int, default: Any = None) -> Any:
        """`getattr(obj, name, default)`; an error other than `AttributeError`
        (an unset slot, no such attribute) is named as what was not opened."""
        try:
            return getattr(obj, name, default)
        except Exception as exc:
            self.failed.append((index, f".{name}", exc))
            return default

    def unopened(self) -> list[Unopened]:
        """What this scan could not open, with the path to each."""
        return [
            Unopened(self.render(self.chain(index)) + where, _error_text(exc))
            for index, where, exc in self.failed
        ]

    def walk_kind(self, obj: Any, index: int, kind: int) -> None:
        """Containers, `Lifted` and traced programs."""
        if kind == _CONTAINER:
            if isinstance(obj, dict | types.MappingProxyType):
                self.push_all(obj.items(), index, _KEY)  # pyright: ignore
            elif isinstance(obj, tuple) and hasattr(obj, "_fields"):  # pyright: ignore
                fields = obj._fields  # pyright: ignore
                self.push_all(zip(fields, obj, strict=True), index, _ATTR)  # pyright: ignore
            elif isinstance(obj, set | frozenset):
                self.push_all(((None, v) for v in obj), index, _SET_ITEM)  # pyright: ignore
            else:
                self.push_all(enumerate(obj), index, _INDEX)  # pyright: ignore
        elif kind == _LIFTED:
            rebuild = function_of(obj)
            assert rebuild is not None
            plain = rebuild(obj)
            self.keep.append(plain)
            self.push(plain, index, "", (obj, None, _STORED_LIFTED))
            self.push(obj.__wrapped__, index, ".__wrapped__")
        elif kind == _JAXPR:
            # The constants a traced program closes over (jax.closure_convert and
            # jax.make_jaxpr keep them here).
            consts = list(obj.consts)
            self.keep.append(consts)
            self.push_all(enumerate(consts), index, ".consts[{}]")

    # -- reports ----------------------------------------------------------------

    def chain(self, index: int) -> list[int]:
        out: list[int] = []
        while index >= 0:
            out.append(index)
            index = self.entries[index][0]
        out.reverse()
        return out

    def render(self, chain: list[int]) -> str:
        start = 0
        entries = self.entries
        for i, entry in enumerate(chain):
            if entries[entry][3]:
                start = i
        text = "".join(_label_text(entries[e][1]) for e in chain[start:])
        return self.module_of(chain, start) + text

    def module_of(self, chain: list[int], start: int) -> str:
        """`mylib.` when the path starts at a global of a module other than the
        one whose code reached it (a library's registry, seen from a test), so
        that the report names the module holding it; else nothing."""
        entries = self.entries
        _, label, edge, _ = entries[chain[start]]
        if (
            edge is None
            or edge[2] != _GLOBAL
            or type(label) is not str
            or "." in label
            or type(edge[0]) is not types.FunctionType
        ):
            return ""
        module = edge[0].__module__
        if self.home is not None:
            return "" if module == self.home else f"{module}."
        for e in chain[:start]:
            before = entries[e][2]
            if (
                before is not None
                and type(before[0]) is types.FunctionType
                and before[0].__module__ != module
            ):
                return f"{module}."
        return ""

    def report(self, tracer: Any, index: int) -> Leak:
        chain = self.chain(index)
        path = self.render(chain)
        description = (
            f"{_compat.tracer_aval(tracer)} from {_compat.transform_name(tracer)}"
        )
        entries = self.entries
        edges = [entries[e][2] for e in chain]
        holder = next(
            (
                i
                for i in reversed(range(len(chain)))
                if (edge := edges[i]) is not None and edge[2] not in _MARKERS
            ),
            None,
        )
        stored = next(
            (e for e in edges[:holder] if e is not None and e[2] in _STORED), None
        )
        if holder is None:
            advice = None if stored is None else _stored_advice(stored[0], stored[2])
            return Leak(path, None, None, None, None, description, advice=advice)
        edge = entries[chain[holder]][2]
        assert edge is not None
        fn, variable, kind = edge
        code = fn if isinstance(fn, types.CodeType) else getattr(fn, "__code__", None)
        qualname = (
            fn.co_qualname
            if isinstance(fn, types.CodeType)
            else getattr(fn, "__qualname__", None) or type(fn).__qualname__
        )
        filename = code.co_filename if isinstance(code, types.CodeType) else None
        lineno = code.co_firstlineno if isinstance(code, types.CodeType) else None
        location = self.render(chain[:holder]) if holder else None
        if location == qualname or not location:
            location = None
        rest = "".join(_label_text(entries[e][1]) for e in chain[holder + 1 :])
        detail = f"{variable}{rest}" if rest else None
        advice = None
        if stored is not None and kind != _GLOBAL:
            advice = _stored_advice(stored[0], stored[2])
        elif (
            kind != _GLOBAL
            and location is not None
            and any(e is not None and e[2] in _REGISTRIES for e in edges[:holder])
        ):
            # A closure kept in a registry (a module's list or dict, a class
            # attribute): lifting it would still store it there.
            advice = (
                "return the value from the transformed function instead of "
                f"storing {qualname} in {location}"
            )
        if _compat.is_jax_closure_convert(fn):
            advice = (
                "jax.closure_convert keeps integer, boolean and key tracers in its "
                "closure: convert with lift.closure_convert(f, *example_args) instead"
            )
        return Leak(
            path,
            qualname,
            variable,
            filename,
            lineno,
            description,
            kind,
            location,
            detail,
            advice,
        )


def scan(
    roots: Iterable[tuple[str, Any]],
    limit: int = DEFAULT_LIMIT,
    only: Iterable[Any] | None = None,
    skip: Iterable[Any] = (),
    unopened: list[Unopened] | None = None,
) -> list[Leak]:
    """`find_leaks` over roots that already have names (`output`, `STASH`);
    `only`: report just these tracers (those JAX's checker named); `skip`: never
    report these (those that escaped before a check began); `unopened`: a list
    that receives what the scan could not open."""
    return scan_tracers(roots, limit, only, skip, unopened=unopened)[0]


def scan_tracers(
    roots: Iterable[tuple[str, Any]],
    limit: int = DEFAULT_LIMIT,
    only: Iterable[Any] | None = None,
    skip: Iterable[Any] = (),
    home: str | None = None,
    unopened: list[Unopened] | None = None,
) -> tuple[list[Leak], list[Any]]:
    """As `scan`, with the escaped tracers themselves, one per leak. `home`:
    the module the roots belong to (a test's); a global of any other module is
    named with its module (`mylib._REGISTRY[0]`)."""
    walk = _Walk(
        limit,
        None if only is None else frozenset(map(id, only)),
        frozenset(map(id, skip)),
        home,
    )
    for label, root in roots:
        if issubclass(type(root), types.ModuleType):  # pyright: ignore[reportUnknownArgumentType]
            module = cast(types.ModuleType, root)
            for name, value in vars(module).items():
                where = f"{module.__name__}.{name}"
                walk.push(value, -1, where, (module, where, _MODULE_GLOBAL), True)
        else:
            walk.push(root, -1, label, reset=True)
    with _gc.paused():
        leaks = walk.run()
    if unopened is not None:
        unopened.extend(walk.unopened())
    return leaks, walk.tracers


class _NoneLive:
    """`LiveTraces` for tracers already known to have escaped."""

    @staticmethod
    def is_live(tracer: Any) -> bool:
        return False


_NONE_LIVE = _NoneLive()
#: The most objects one frame's naming walk visits.
_FRAME_LIMIT = 200_000


def frame_leaks(
    holdings: Iterable[_compat.FrameHolding],
) -> tuple[list[Leak], list[Any], list[Unopened]]:
    """The leaks of tracers that the user's frames held in local variables
    when their trace exited (`_compat.watching_trace_exits(frames=...)`), each
    named by its shortest path from the local (`seen[0]`, a local variable of
    `test_log`); the tracers, one per leak; what the walk could not open."""
    leaks: list[Leak] = []
    tracers: list[Any] = []
    unopened: list[Unopened] = []
    for held in holdings:
        wanted = {id(t): (name, t) for name, t in held.tracers}
        walk = _Walk(_FRAME_LIMIT, frozenset(wanted), live=_NONE_LIVE)
        walk.stop = True
        for name, value in held.names:
            walk.push(value, -1, name, (held.code, name, _FRAME_LOCAL), reset=True)
        try:
            with _gc.paused():
                walk.run()
        except Exception as exc:  # named, and each tracer reported as held
            where = f"the locals of {held.code.co_qualname}"
            unopened.append(Unopened(where, _error_text(exc)))
        leaks.extend(walk.leaks)
        tracers.extend(walk.tracers)
        unopened.extend(walk.unopened())
        named = {id(t) for t in walk.tracers}
        for key, (name, tracer) in wanted.items():
            if key not in named:  # reached by a way the walk does not take
                leaks.append(_local_leak(held.code, name, tracer))
                tracers.append(tracer)
    return leaks, tracers, unopened


def _local_leak(code: types.CodeType, name: str, tracer: Any) -> Leak:
    return Leak(
        f"<inside {name}>",
        code.co_qualname,
        name,
        code.co_filename,
        code.co_firstlineno,
        f"{_compat.tracer_aval(tracer)} from {_compat.transform_name(tracer)}",
        _FRAME_LOCAL,
    )
