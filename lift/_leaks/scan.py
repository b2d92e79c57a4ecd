"""The leak scan: find tracers that outlived the transform that made them.

The walk starts from the given roots and follows what Python code can
reach: each part `lift._holders.held` describes, named by its label. That
is function cells, defaults, bound `self` and `functools.partial`
arguments. It is the module globals a function's code
names, `Lifted` captures, pytree children and containers. It is objects'
`__dict__` and `__slots__`, class attributes, and the constants of traced
programs.

The walk is iterative, since closures nest 10 000 deep. It is breadth-first,
so each leak is named by its shortest path. It visits each object once
(cycles are fine) and stops after a bounded number of objects.

Some objects it cannot open: an attribute, `__dict__` or iteration raises.
It names them (`Unopened`) after the leaks in a `LeakError`'s report, and
in `find_leaks(...).unopened`. It never raises an error of its own for
them, so that a clean scan passes.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Iterable
from typing import Any, Final, cast

import numpy as np

from .. import _compat
from .._base import gc as _gc
from .._base.atoms import SCALARS
from .._base.errors import code_of
from .._base.owners import is_library_type, is_user_function
from .._holders.closure import class_parts, dict_static, holder_of, labelled, slots_of
from .._holders.held import ATTR, INDEX, KEY, parts as parts_of
from .._holders.labels import ARG, CELL, FUNC, KEYWORD, METHOD_FUNC, SELF, WRAPPED
from .._holders.reach import reach
from .._holders.stdlib import (
    BUILTIN_CONTAINERS,
    SUSPENDED_FRAMES,
    WEAK_HOLDERS,
    array_items,
    weakref_parts,
)
from .objects import SCAN_UNOPENED, ObjectWalk
from .report import (
    BOUND,
    CAPTURED,
    GLOBAL,
    MODULE_GLOBAL,
    PARTIAL,
    STORED_LIFTED,
    Leak,
    Unopened,
    chain_to,
    label_text,
    leak_at,
)

#: Default bound on the number of objects one scan visits.
DEFAULT_LIMIT = 2_000_000


class LeakWalk(ObjectWalk):
    """One breadth-first scan; each entry remembers its parent and its label."""

    def __init__(
        self,
        limit: int,
        only: frozenset[int] | None = None,
        skip: frozenset[int] = frozenset(),
        home: str | None = None,
        live: Any = None,
        first: bool = False,
        globals: bool = True,
        weak: bool = True,
    ) -> None:
        super().__init__(home)
        self.limit = limit
        # The bounded mode capture asks for (`first_tracer`): stop at the first
        # tracer found (its entry `found`), and do not follow a function's
        # globals (a static capture's code reads them when it runs, from its
        # module: they are not captured).
        self.first = first
        self.found: int | None = None
        self.globals = globals
        self.held: set[int] | None = None  # ids of functions met (`first_tracer`)
        self.methods: set[int] = set()  # ids of what classes hold (not in `held`)
        self.only = only  # ids of the tracers to report (JAX's report), or all
        self.skip = skip  # ids of tracers not to report (escaped before)
        self.tracers: list[Any] = []  # the tracer of each leak, in order
        # What is live, or (`only` known to have escaped) `NONE_LIVE`.
        self.live: Any = _compat.live_traces() if live is None else live
        # Whether to follow weak references: not when naming tracers known to
        # be alive (a strong holder keeps them; a weak one names none).
        self.weak = weak
        self.leaks: list[Leak] = []
        self.code_names: dict[types.CodeType, tuple[str, ...]] = {}

    def run(self) -> list[Leak]:
        visited, limit = 0, self.limit
        queue, entries, seen = self.queue, self.entries, self.seen
        popleft, append, add = queue.popleft, queue.append, seen.add
        atomic, plain = SCAN_UNOPENED, self.plain
        plain_keys, tracer_type = SCALARS, _compat.Tracer
        only, skip, expand = self.only, self.skip, self.expand
        while queue and visited < limit:
            obj, index = popleft()
            visited += 1
            cls = type(obj)  # pyright: ignore[reportUnknownVariableType]
            # Lists, tuples and dicts, the most common objects, are walked here
            # (as `parts` would): a call less per object.
            if cls is list or cls is tuple:
                items, fmt = enumerate(obj), INDEX  # pyright: ignore[reportUnknownArgumentType]
            elif cls is dict:
                items, fmt = obj.items(), KEY  # pyright: ignore[reportUnknownVariableType]
                if not plain_keys.issuperset(map(type, obj)):  # pyright: ignore[reportUnknownArgumentType]
                    # Keys holding objects (`{Handle(x): ...}`), which may hold
                    # a tracer: by `dict_static`, as any dict node's.
                    self.parts(dict_static(obj), index)  # pyright: ignore[reportUnknownArgumentType]
            elif cls in plain:
                items, fmt = obj.__dict__.items(), ATTR  # pyright: ignore[reportUnknownVariableType]
            else:
                if issubclass(cls, tracer_type):  # pyright: ignore[reportUnknownArgumentType]
                    if (
                        (only is None or id(obj) in only)
                        and id(obj) not in skip
                        and not self.live.is_live(obj)
                    ):
                        if self.first:
                            self.found = index
                            break
                        self.leaks.append(leak_at(entries, self.home, obj, index))
                        self.tracers.append(obj)
                        if only is not None and len(self.tracers) == len(only):
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
        # Lists, tuples and dicts never come here: `run` walks them itself, and
        # `FrameLook` (frames.py) reads their items before it opens an object.
        cls: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
        if cls is types.FunctionType:
            self.function(obj, index)
        elif isinstance(obj, type):
            parts = class_parts(obj)  # pyright: ignore[reportUnknownArgumentType]
            self.methods.update(id(v) for _, v in parts)  # code, not a registry
            self.parts(parts, index)
        elif cls is np.ndarray:
            self.parts(array_items(obj), index)  # NumPy object arrays
        elif issubclass(cls, BaseException):  # pyright: ignore[reportUnknownArgumentType]
            self.exception(obj, cls, index)  # pyright: ignore[reportUnknownArgumentType]
        elif not self.weak and issubclass(cls, WEAK_HOLDERS):  # pyright: ignore[reportUnknownArgumentType]
            # A weak holder's callback; not what it refers to, alive only while
            # a strong holder keeps it.
            if issubclass(cls, weakref.ReferenceType):  # pyright: ignore[reportUnknownArgumentType]
                self.parts(weakref_parts(obj), index)
        elif (inside := parts_of(obj)) is not None:
            if holder_of(obj) is not None:  # named by what each part fills
                if self.held is not None:
                    self.held.add(id(obj))
                self.named(obj, inside, index)
            elif cls in SUSPENDED_FRAMES:  # locals of the generator's code
                frame = getattr(obj, SUSPENDED_FRAMES[cls])
                self.named(frame and frame.f_code, inside, index)
            else:
                self.kept_parts(inside, index)  # a cache's results, say
                if isinstance(obj, _CONTAINERS) and cls not in BUILTIN_CONTAINERS:
                    self.own_attributes(obj, slots_of(cls), index)  # a subclass's
        else:
            self.other(obj, cls, index)  # pyright: ignore[reportUnknownArgumentType]

    def exception(self, exc: BaseException, cls: type, index: int) -> None:
        """A kept exception's arguments, attributes, notes and the exceptions it
        chains.

        Not its traceback: the frames it unwound hold the running code's
        locals, not data the error was given."""
        for label in (".args", ".__cause__", ".__context__"):
            self.push(getattr(exc, label[1:]), index, label)
        if is_library_type(cls):  # a builtin error: its own attributes only
            self.own_attributes(exc, (), index)
        else:
            self.other(exc, cls, index)

    def function(self, fn: types.FunctionType, index: int) -> None:
        """Push a function's parts, and what its code names in its globals.

        Through a module, the names its code uses are followed, level by
        level (`mylib.step`, `pkg.mod.step` through `import pkg.mod`). A
        module is not walked whole; JAX's and NumPy's are vast. Its other
        names are reached, if at all, from those."""
        if self.held is not None and id(fn) not in self.methods:  # `first_tracer`
            self.held.update((id(fn), *map(id, fn.__closure__ or ())))
        self.named(fn, labelled(fn), index)
        if not (self.globals and is_user_function(fn)):
            return
        names = _code_names(fn.__code__, self.code_names)
        spaces = [(fn.__globals__, "")]  # grows by the modules met
        done: set[int] = set()
        for space, prefix in spaces:
            for name in filter(space.__contains__, names):
                value, where = space[name], prefix + name
                if type(value) is not types.ModuleType:
                    self.push(value, index, where, (fn, where, GLOBAL), reset=True)
                elif id(value) not in done:
                    done.add(id(value))
                    spaces.append((vars(value), where + "."))

    def named(self, owner: Any, parts: Iterable[Any], index: int) -> None:
        """Push the parts of a function, a partial, a bound method or a
        suspended generator (`owner`: its code), each named by what it fills.

        A cell is followed to its value. A partial's argument is named by
        its parameter. A `lift.jit` function's function is taken as lift's
        closure graph takes it: flattened, it would be lifted afresh at every
        visit, and a `lift.jit` closure calling itself would recurse."""
        fn: Any = owner
        for label, value in parts:
            kind = label.kind
            edge = None
            if kind == CELL:
                try:
                    value = value.cell_contents
                except ValueError:  # an empty cell: the variable is not bound yet
                    continue
                edge = (owner, label.variable, CAPTURED)
            elif kind in (FUNC, METHOD_FUNC):
                fn = value
            elif kind == SELF:
                edge = (fn, "self", BOUND)
            elif kind == ARG:
                edge = (fn, param_name(fn, cast(int, label.key)), PARTIAL)
            elif kind == KEYWORD:
                edge = (fn, label.variable, PARTIAL)
            elif kind == WRAPPED:
                edge = (owner, None, STORED_LIFTED)
            elif label.role is not None:  # a default, an attribute, a local
                edge = (owner, label.variable, label.role)
            self.push(value, index, label, edge)


_CONTAINERS: Final = tuple(BUILTIN_CONTAINERS)


# `LiveTraces` for tracers already known to have escaped: no trace is live.
NONE_LIVE: Final = _compat.LiveTraces([])


def first_tracer(
    obj: Any, limit: int, live: Any = None, held: set[int] | None = None
) -> str | None:
    """The path (`.a[0].b`) from `obj` to the nearest tracer it holds, or
    `None` if the first `limit` objects hold none.

    Any tracer counts, or given `live`, one whose trace has exited. The leak
    scan's walk, bounded, for capture:
    what a static capture hides where no pytree reaches. `held` gets the ids
    of the functions, their cells and the holders it passes."""
    walk = LeakWalk(
        limit, live=NONE_LIVE if live is None else live, first=True, globals=False
    )
    walk.held = held
    walk.push(obj, -1, "")
    walk.run()
    if walk.found is None:
        return None
    return "".join(
        label_text(walk.entries[e][1]) for e in chain_to(walk.entries, walk.found)
    )


def scan_tracers(
    roots: Iterable[tuple[str, Any]],
    limit: int = DEFAULT_LIMIT,
    only: Iterable[Any] | None = None,
    skip: Iterable[Any] = (),
    home: str | None = None,
    unopened: list[Unopened] | None = None,
    weak: bool = True,
) -> tuple[list[Leak], list[Any]]:
    """As `scan`, with the escaped tracers themselves, one per leak. `home`:
    the module the roots belong to (a test's); a global of any other module is
    named with its module (`mylib._REGISTRY[0]`). Without `weak`, weak
    references are not followed."""
    ids = None if only is None else frozenset(map(id, only))
    walk = LeakWalk(limit, ids, frozenset(map(id, skip)), home, weak=weak)
    for label, root in roots:
        if issubclass(type(root), types.ModuleType):  # pyright: ignore[reportUnknownArgumentType]
            module = cast(types.ModuleType, root)
            for name, value in vars(module).items():
                where = f"{module.__name__}.{name}"
                walk.push(value, -1, where, (module, where, MODULE_GLOBAL), True)
        else:
            walk.push(root, -1, label, reset=True)
    with _gc.paused():
        leaks = walk.run()
    if unopened is not None:
        unopened.extend(walk.unopened())
    return leaks, walk.tracers


def _code_names(
    code: types.CodeType, cache: dict[types.CodeType, tuple[str, ...]]
) -> tuple[str, ...]:
    """Global names a code object (and the code nested in it) refers to."""
    found = cache.get(code)
    if found is None:
        nested: Any = lambda c: [k for k in c.co_consts if type(k) is types.CodeType]  # pyright: ignore[reportUnknownLambdaType, reportUnknownMemberType, reportUnknownVariableType, reportUnknownArgumentType]
        names = (n for c in reach([code], nested) for n in c.co_names)
        found = cache[code] = tuple(dict.fromkeys(names))
    return found


def param_name(fn: Any, index: int) -> str:
    """The parameter of `fn` that a partial's argument `index` fills."""
    if type(fn) is types.MethodType:  # its `self` is bound already
        fn, index = fn.__func__, index + 1
    code = code_of(fn)
    if isinstance(code, types.CodeType) and index < code.co_argcount:
        return code.co_varnames[index]
    return f"args[{index}]"
