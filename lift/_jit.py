"""`lift.jit`: `jax.jit` whose compiled programs are keyed on code, not on identity.

`jax.jit(fn)` keys its cache on the function object, so a closure made anew (one
per learning rate, one per call of `make_step(lr)`) compiles anew, with its
captures baked in as constants. `lift.jit` instead passes the function itself, as
a [`lift.Lifted`][] pytree, as the first argument of one jitted trampoline per
code object: the `Lifted`'s treedef (code and static captures) keys the program,
and its leaves (dynamic captures) are parameters of it.

Captures are read when the function is called, as Python reads them. Lifting on
every call would cost tens of microseconds, so each `lift.jit` function keeps the
cells of the graph it last lifted, with what they held, and lifts again only when
one of them holds another object (`is`, not `==`). While they hold the same, a
call passes the lifted function's leaves, a flat tuple, to the program that
shares its treedef (`Program.specialized`): JAX dispatches it without calling
back into Python.
"""

from __future__ import annotations

import copy
import functools
import inspect
import operator
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, Generic, NamedTuple, Self, TypeVar, cast, overload

import jax
from jax.core import Tracer
from typing_extensions import ParamSpec

from ._closure import Holder, cells as cells_of, register_holder
from ._compat import DEFAULT_DEVICE, X64, conversion_context
from ._errors import LiftError, describe, under_lift_jit
from ._labels import WRAPPED, Label
from ._lift import lift
from ._lifted import Lifted
from ._nodes import CellNode, FunctionNode, PartialNode, Ref, Template
from ._programs import (
    CALLING as _CALLING,
    MISSING,
    Lowered,
    Program,
    Traced,
    explain_call_error,
    options_key,
    program,
)
from ._skeleton import Skeleton
from ._verify import STATE as _VERIFY, disagree, same_leaves

__all__ = ["JitFunction", "jit"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

_EMPTY: Final = object()  # what an empty cell holds, for the staleness check
_contents: Final = operator.attrgetter("cell_contents")
_code: Final = operator.attrgetter("__code__")
_defaults: Final = operator.attrgetter("__defaults__")
_kwdefaults: Final = operator.attrgetter("__kwdefaults__")
_attrs: Final = operator.attrgetter("__dict__")
_is: Final = operator.is_
# -- what a call reads -------------------------------------------------------------


class _Snapshot:
    """A lifted function, and what the graph it came from held then: it is current
    while each cell holds the same object, and each function of the graph the
    same defaults and attributes (`_Watch`).

    Made before lifting, from the cells and functions the lift is expected to
    read (`targets`), and completed by `lifted`; `verified` once the lift is
    known to have read those (a first call's lift is checked by the next call).
    """

    __slots__ = ("cells", "contents", "context", "lifted", "targets", "verified")

    def __init__(self, targets: list[Any]) -> None:
        self.targets = targets
        self.context = conversion_context()
        cells: list[Any] = [
            t
            if type(t) is types.CellType
            else _Watch(t)
            if type(t) is types.FunctionType
            else _PartialWatch(t)
            for t in targets
        ]
        contents: list[Any] = []
        for cell in cells:
            try:
                contents.append(cell.cell_contents)
            except ValueError:
                contents.append(_EMPTY)
        self.cells = tuple(cells)
        self.contents = tuple(contents)
        self.lifted: Any = None
        self.verified = False

    def current(self) -> bool:
        if conversion_context() != self.context:
            return False
        for cell, last in zip(self.cells, self.contents, strict=True):
            try:
                now = cell.cell_contents
            except ValueError:
                now = _EMPTY
            if now is not last:
                return False
        return True


def _targets(lifted: Any, root: Any) -> list[Any]:
    """The cells and functions of the graph `lifted` was lifted from."""
    targets: list[Any] = []
    if isinstance(lifted, Lifted) and not isinstance(root, Lifted):
        skeleton: Skeleton = lifted._skeleton  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]
        closure = getattr(root, "__closure__", None)
        if type(root) is types.FunctionType and len(skeleton.nodes) == 1 + len(
            closure or ()
        ):
            # The common case: a function whose captures hold no functions.
            targets.extend(closure or ())
            targets.append(root)
        else:
            _graph(skeleton, root, targets)
    return targets


def _guess(root: Any) -> list[Any]:
    """The targets of a function not lifted yet: its cells, and those of the
    closures they hold (checked against the lift's graph after it)."""
    targets: list[Any] = []
    if type(root) is types.FunctionType:
        seen = {id(root)}
        todo = [root]
        while todo:
            fn = todo.pop()
            targets.append(fn)
            for cell in fn.__closure__ or ():
                if id(cell) in seen:
                    continue
                seen.add(id(cell))
                targets.append(cell)
                try:
                    value = cell.cell_contents
                except ValueError:
                    continue
                if (
                    type(value) is types.FunctionType
                    and value.__closure__ is not None
                    and id(value) not in seen
                ):
                    seen.add(id(value))
                    todo.append(value)
    return targets


def _same(a: list[Any], b: list[Any]) -> bool:
    """The same cells and functions, in any order: a snapshot made from either
    watches the other's."""
    return len(a) == len(b) and {id(x) for x in a} == {id(x) for x in b}


# How many times a lift is tried again when a capture it read was rebound
# meanwhile, before the function is lifted afresh on each call instead.
_ATTEMPTS: Final = 8


class _Watch:
    """Stands for a function's code, defaults and attributes among the watched
    cells: its `cell_contents` is one token while they are the objects they
    were, and a new object once one is rebound or changed in place
    (`f.scale = 3.0`, `f.__defaults__ = ...`, `f.__kwdefaults__['lr'] = 0.5`,
    `f.__code__ = ...` as IPython's autoreload does)."""

    __slots__ = ("fn", "state", "token")

    def __init__(self, fn: types.FunctionType) -> None:
        self.fn = fn
        self.state = _function_state(fn)
        self.token = object()

    @property
    def cell_contents(self) -> object:
        return self.token if _function_state(self.fn) == self.state else object()


class _PartialWatch:
    """As `_Watch`, for a captured `functools.partial`: its function, arguments,
    keywords (the dict and what it holds: Python reads it at each call,
    `p.keywords['lr'] = 0.5` changes it in place) and attributes."""

    __slots__ = (
        "args",
        "attr_names",
        "attr_values",
        "func",
        "keywords",
        "partial",
        "token",
        "values",
    )

    def __init__(self, partial: functools.partial[Any]) -> None:
        self.partial = partial
        self.func = partial.func
        self.args = partial.args
        self.keywords = partial.keywords
        self.values = tuple(self.keywords.values())
        attrs = vars(partial)
        self.attr_names = tuple(attrs)
        self.attr_values = tuple(attrs.values())
        self.token = object()

    @property
    def cell_contents(self) -> object:
        p = self.partial
        keywords = p.keywords
        attrs = vars(p)
        if (
            p.func is self.func
            and p.args is self.args
            and keywords is self.keywords
            and len(keywords) == len(self.values)
            and all(map(_is, keywords.values(), self.values))
            and (
                tuple(attrs) == self.attr_names
                and all(map(_is, attrs.values(), self.attr_values))
                if self.attr_names
                else not attrs
            )
        ):
            return self.token
        return object()


class _ById:
    """A value compared by identity (`==` on two of them is `is`)."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is _ById and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


def _function_state(fn: types.FunctionType) -> tuple[Any, ...]:
    """What a function holds besides its cells, compared by identity: its code,
    its defaults, its keyword-only defaults (the dict and what it holds: Python
    reads it at each call), and its attributes."""
    kwdefaults = fn.__kwdefaults__
    return (
        _ById(fn.__code__),
        _ById(fn.__defaults__),
        _ById(kwdefaults),
        tuple((k, _ById(v)) for k, v in kwdefaults.items()) if kwdefaults else (),
        tuple((k, _ById(v)) for k, v in fn.__dict__.items()),
    )


class _Recorded(NamedTuple):
    """What a `_Watch` recorded: code, defaults, keyword-only defaults, the
    values these held (`None` for no dict), and whether the function had
    attributes."""

    code: Any
    defaults: Any
    kwdefaults: Any
    kwvalues: tuple[Any, ...] | None
    attrs: bool


def _recorded(watch: _Watch) -> _Recorded:
    code, defaults, kwdefaults, items, attrs = watch.state
    values = None if kwdefaults.value is None else tuple(v.value for _, v in items)
    return _Recorded(code.value, defaults.value, kwdefaults.value, values, bool(attrs))


def _graph(skeleton: Skeleton, root: Any, cells: list[Any]) -> None:
    """The original cells and functions behind the skeleton's nodes.

    Follows the skeleton from `root` the way it was captured: every node is found
    from a node of smaller index, through a cell, default, partial argument or
    bound method's parts.
    """
    nodes = skeleton.nodes
    objs: list[Any] = [None] * len(nodes)
    objs[0] = root
    for i, node in enumerate(nodes):
        obj = objs[i]
        if obj is None:
            continue
        if type(node) is FunctionNode:
            for index, (_, cell) in zip(node.cells, cells_of(obj), strict=True):
                objs[index] = cell
            cells.append(obj)
        elif type(node) is CellNode or type(node) is PartialNode:
            cells.append(obj)
        for label, template in node.parts():
            slots = template.slots
            if not any(type(s) is Ref for s in slots):
                continue
            value = label.read(obj)
            for slot, v in zip(slots, _parts(template, value), strict=True):
                if type(slot) is Ref and objs[slot.index] is None:
                    objs[slot.index] = v


def _parts(template: Template, value: Any) -> list[Any]:
    """The values standing in a template's slots."""
    treedef = template.treedef  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if treedef is None:
        return [value]
    return list(treedef.flatten_up_to(value))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]


def _holds_tracer(lifted: Any) -> bool:
    if isinstance(lifted, Lifted):
        leaves: Any = lifted._leaves  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]
    else:
        leaves = jax.tree_util.tree_leaves(lifted)
    return any(isinstance(leaf, Tracer) for leaf in leaves)


def _check_cached(
    fn: Any, lift_now: Callable[[], Any], first: Any, tree: Any, kept: Any
) -> None:
    """With `lift.verifying()` on: that what a cached call passes (`first`, the
    leaves for `tree`, or a lifted function when `tree` is `None`) is what
    lifting the function now gives. `kept` is the lift it was made from: when
    that too differs from lifting now, the captures changed in place."""
    try:
        fresh = lift_now()
    except LiftError as err:
        raise disagree(
            "lift.jit cached call", fn, f"lifting it now refuses it ({err})"
        ) from err
    leaves, treedef = cast(
        "tuple[list[Any], Any]",
        jax.tree_util.tree_flatten(fresh),  # pyright: ignore[reportUnknownMemberType]
    )
    if tree is None:
        first, tree = cast(
            "tuple[list[Any], Any]",
            jax.tree_util.tree_flatten(first),  # pyright: ignore[reportUnknownMemberType]
        )
    if treedef != tree:
        raise disagree(
            "lift.jit cached call",
            fn,
            f"another treedef:\n  cached: {tree!r:.400}\n  now:    {treedef!r:.400}",
        )
    differs = same_leaves(first, leaves)
    if differs is not None:
        if kept is None or same_leaves(jax.tree_util.tree_leaves(kept), leaves) is None:
            raise disagree("lift.jit cached call", fn, f"other leaves ({differs})")
        # Every capture it watches holds what it held, and the lift it kept
        # differs from one made now: a value inside a captured container or
        # object changed in place, which a cached call does not see (it would
        # walk them on every call).
        raise LiftError(
            f"lift.jit's cached call of {describe(fn)} serves leaves that lifting "
            f"it now would not ({differs}): a value inside a captured container "
            "or object (`config['lr'] = 0.5`, an optimizer updating a captured "
            "model) changed in place since the function was last lifted, which a "
            "cached call does not see.\nFix: rebind the variable "
            "(`config = {**config, 'lr': 0.5}`), or pass the object as an "
            "argument of the function.",
            anchor="changed-in-place",
        )


# -- the public wrapper ----------------------------------------------------------


# The fast path checks one cell and one function's defaults, keyword-only
# defaults and attributes (held when lifted: none), or, when that cell is `None`,
# several cells and `_Watch`es. These stand in for the cell: a function not
# lifted yet (never current), and a graph without cells (always current).
_STALE_CELL: Final = types.CellType(None)  # checked against `_EMPTY`
_NO_CELL: Final = types.CellType(_EMPTY)


class _Fast(NamedTuple):
    """Everything a call reads, in one object written in one assignment, so that
    another thread never sees half an update: what the graph held when lifted
    (one cell, or several cells and `_Watch`es, a partial's included; with
    several, the functions, their code, defaults and keyword-only defaults are
    tuples of them, each
    function's attribute dict empty when lifted, and one whose keyword-only
    defaults hold values is watched by a `_Watch`), the float width and default
    device its scalars were converted under (`None`: it has none), the program
    to call and what to pass it in front of the arguments (the lifted
    function's leaves, or the function itself: `JitFunction._entry`), the
    treedef that rebuilds the function from them (`_CALLING`, or `None`), and
    the snapshot it was made from."""

    cell: types.CellType | None
    content: Any
    fn: Any
    code: Any
    defaults: Any
    kwdefaults: Any
    kwvalues: tuple[Any, ...] | None  # what the one function's dict holds
    cells: tuple[Any, ...]
    contents: tuple[Any, ...]
    context: tuple[Any, Any] | None
    call: Any
    first: Any
    tree: Any
    snapshot: _Snapshot | None


# The one function, when the graph has none: no defaults, no attributes.
def _no_fn() -> None: ...


_NO_FN: Final = _no_fn
_NO_STATE: Final = _Recorded(_NO_FN.__code__, None, None, None, False)
_STALE: Final = _Fast(
    _STALE_CELL,
    _EMPTY,
    _NO_FN,
    _NO_FN.__code__,
    None,
    None,
    None,
    (),
    (),
    None,
    None,
    None,
    None,
    None,
)


def _stale(snapshot: _Snapshot | None, entry: tuple[Any, Any, Any] | None) -> _Fast:
    """A state every call checks on the slow path (`JitFunction._slow`)."""
    if snapshot is None and entry is None:
        return _STALE
    call, first, tree = entry if entry is not None else (None, None, None)
    return _STALE._replace(call=call, first=first, tree=tree, snapshot=snapshot)


def _scalars(lifted: Any) -> bool:
    """Whether `lifted`'s leaves hold Python scalars, converted by the float
    width and default device of the moment (any leaf, if it is no `Lifted`)."""
    if not isinstance(lifted, Lifted):
        return True
    return any(type(leaf) in _SCALARS for leaf in lifted._leaves)  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType, reportUnknownArgumentType, reportUnknownVariableType]


_SCALARS: Final = frozenset({float, complex, int, bool})
_ONE_DEVICE: Final = object()  # a process with one device: its default is fixed
_devices: list[bool] = []


def _one_device() -> bool:
    """Whether the process has a single device (of the default backend, and no
    other backend), so that `jax_default_device` cannot place a scalar elsewhere."""
    if not _devices:
        api = cast(Any, jax)
        _devices.append(api.default_backend() == "cpu" and api.device_count() == 1)
    return _devices[0]


_X64: Final = X64
_DEVICE: Final = DEFAULT_DEVICE


class JitFunction(Generic[_P, _R]):
    """A function compiled by [`lift.jit`][]: call it, `.lower(...)` or `.trace(...)`.

    Bound as a method when stored on a class (`self` is then its first argument).
    """

    __slots__ = (
        "__dict__",
        "__weakref__",
        "_fast",
        "_fn",
        "_jit",
        "_lift_options",
        "_min_nargs",
        "_seen",
        "program",
    )

    def __init__(
        self,
        fn: Callable[_P, _R],
        program: Program,
        lift_options: dict[str, Any],
    ) -> None:
        self._setup(fn, program, lift_options)
        attrs = self.__dict__
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            value = getattr(fn, attr, MISSING)
            if value is not MISSING:
                attrs[attr] = value

    def _setup(self, fn: Any, program: Program, lift_options: dict[str, Any]) -> None:
        self._fn = fn
        self.program = program
        self._jit = program.jitted
        self._min_nargs = program.min_nargs
        self._lift_options = lift_options
        self._seen = False  # called before
        # What a call reads, the snapshot of the last lift included (`_Fast`).
        self._fast: _Fast = _STALE

    @property
    def __wrapped__(self) -> Callable[_P, _R]:
        """The function as it was decorated."""
        return self._fn

    def _lifted(self) -> Any:
        """The function as a pytree, lifted again if a capture was rebound."""
        fast = self._state()
        snapshot = fast.snapshot
        return fast.first if snapshot is None else snapshot.lifted

    def _state(self) -> _Fast:
        """A state whose snapshot is current (lifting again if a capture was
        rebound), kept for the next calls; or, for a function that cannot be
        kept, one without a snapshot, holding a fresh lift in `first`."""
        fast = self._fast
        snapshot = fast.snapshot
        fn = self._fn
        if snapshot is not None and snapshot.current():
            if snapshot.verified:
                if _VERIFY.on:
                    lifted = snapshot.lifted
                    _check_cached(fn, self._lift, lifted, None, lifted)
                return fast
            # Made by a first call (`_slow`): kept if the lift read what it watches.
            found = _targets(snapshot.lifted, fn)
            if _same(found, snapshot.targets):
                return self._keep(snapshot)
            targets = found
        else:
            targets = snapshot.targets if snapshot is not None else _guess(fn)
        lifted: Any = None
        for _ in range(_ATTEMPTS):
            # What the graph holds is read before the lift and checked after it:
            # a capture rebound meanwhile (by another thread) may have been read
            # either way, so the lift is tried again. Read after, it would be
            # recorded as current next to a lift of the old value.
            snapshot = _Snapshot(targets)
            lifted = self._lift()
            if _holds_tracer(lifted):
                # A captured tracer lives as long as its trace: keeping it here
                # would leak it, so such a function is lifted afresh on each call.
                self._fast = _STALE
                return _STALE._replace(first=lifted)
            found = _targets(lifted, fn)
            if _same(found, targets) and snapshot.current():
                break
            targets = found
        else:
            self._fast = _STALE  # rebound faster than it lifts: keep nothing
            return _STALE._replace(first=lifted)
        snapshot.lifted = lifted
        return self._keep(snapshot)

    def _lift(self) -> Any:
        options = self._lift_options
        try:
            return lift(self._fn, **options) if options else lift(self._fn)
        except LiftError as err:
            better = under_lift_jit(err)
            if better is err:
                raise
            try:
                raise better from None
            finally:
                del better  # not kept by this frame (its traceback holds it)

    def _keep(self, snapshot: _Snapshot) -> _Fast:
        """Keep a snapshot known to be current, with the fast path that goes with
        it, in one assignment; that state."""
        snapshot.verified = True
        lifted = snapshot.lifted
        cells, contents = snapshot.cells, snapshot.contents
        if any(c is _EMPTY for c in contents):
            # Reading an empty cell raises: `_Snapshot.current` copes.
            fast = self._fast = _stale(snapshot, None)
            return fast
        if self._jit is None or self._min_nargs:
            # With one sharding for every argument, or argument numbers counted
            # from the end, the program depends on how many arguments there are:
            # every call takes `_slow`, which checks the snapshot.
            entry = None if self._jit is None else self._entry(lifted, self._min_nargs)
            fast = self._fast = _stale(snapshot, entry)
            return fast
        call, first, tree = self._entry(lifted, self._min_nargs)
        # The width and device the scalars were converted under, if any.
        context = snapshot.context if _scalars(lifted) else None
        if context is not None and context[1] is None and _one_device():
            # No default device to set but the one: only the width can change.
            context = (context[0], _ONE_DEVICE)
        one = [i for i, c in enumerate(cells) if type(c) is types.CellType]
        watched = [c for c in cells if type(c) is _Watch]
        # What each function held when the snapshot was made (before the lift).
        recorded = [_recorded(w) for w in watched]
        if (
            len(one) <= 1
            and len(watched) <= 1
            and len(one) + len(watched) == len(cells)  # no partial
            and not any(r.attrs for r in recorded)
        ):
            # One cell and one function without attributes: checked inline.
            cell, content = (
                (cells[one[0]], contents[one[0]]) if one else (_NO_CELL, _EMPTY)
            )
            fn, (code, defaults, kwdefaults, kwvalues, _) = (
                (watched[0].fn, recorded[0]) if watched else (_NO_FN, _NO_STATE)
            )
            fast = _Fast(
                cell,
                content,
                fn,
                code,
                defaults,
                kwdefaults,
                kwvalues,
                (),
                (),
                context,
                call,
                first,
                tree,
                snapshot,
            )
        else:
            # Functions without attributes or keyword-only defaults are checked
            # in C (`__call__`), not by their `_Watch`'s property.
            plain = [
                (w, r)
                for w, r in zip(watched, recorded, strict=True)
                if not r.attrs and r.kwdefaults is None
            ]
            inline = {id(w) for w, _ in plain}
            kept = [
                (c, v)
                for c, v in zip(cells, contents, strict=True)
                if id(c) not in inline
            ]
            fast = _Fast(
                None,
                None,
                tuple(w.fn for w, _ in plain),
                tuple(r.code for _, r in plain),
                tuple(r.defaults for _, r in plain),
                tuple(r.kwdefaults for _, r in plain),
                None,
                tuple(c for c, _ in kept),
                tuple(v for _, v in kept),
                context,
                call,
                first,
                tree,
                snapshot,
            )
        # Current when made: the snapshot was checked after the lift, and its
        # `_Watch`es and defaults read before it.
        self._fast = fast
        return fast

    def _entry(self, lifted: Any, nargs: int) -> tuple[Any, Any, Any]:
        """The program for a call with `nargs` positional arguments, what it takes
        in front of them, and the treedef it rebuilds the function with: the
        leaves of `lifted`, for the program that shares its treedef
        (`Program.specialized`), or `lifted` itself (and `None`)."""
        if self._jit is not None and nargs >= self._min_nargs:
            leaves, treedef = cast(
                "tuple[list[Any], Any]",
                jax.tree_util.tree_flatten(lifted),  # pyright: ignore[reportUnknownMemberType]
            )
            specialized = self.program.specialized(treedef)
            if specialized is not None:
                return specialized, tuple(leaves), treedef
        return self._jitted(nargs), lifted, None

    def _slow(self, nargs: int) -> tuple[Any, Any, Any]:
        """What `_entry` gives for a call with `nargs` positional arguments, when
        the fast path's check fails: a capture rebound, a first call, or a call
        the fast path does not serve (see `_keep`)."""
        if not self._seen:
            # A first call lifts without checking what the lift read: a closure
            # made anew for one call (`make_step(lr)(w, g)`) never needs it. The
            # next call checks it (`_state`), and keeps this lift if current.
            self._seen = True
            snapshot = _Snapshot(_guess(self._fn))
            lifted = self._lift()
            if not _holds_tracer(lifted):
                snapshot.lifted = lifted
                self._fast = _stale(snapshot, None)
            return self._entry(lifted, nargs)
        fast = self._state()
        if fast.snapshot is None:  # not kept: `first` is the lift
            return self._entry(fast.first, nargs)
        if fast.call is None or nargs < self._min_nargs:
            return self._entry(fast.snapshot.lifted, nargs)
        return fast.call, fast.first, fast.tree

    def _jitted(self, nargs: int) -> Any:
        jitted = self._jit
        if jitted is None or nargs < self._min_nargs:
            return self.program.for_nargs(nargs)
        return jitted

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        (
            cell,
            content,
            fn,
            code,
            defaults,
            kwdefaults,
            kwvalues,
            cells,
            contents,
            context,
            call,
            first,
            tree,
            snapshot,
        ) = self._fast
        try:
            if cell is not None:
                current = (
                    cell.cell_contents is content
                    and fn.__code__ is code
                    and fn.__defaults__ is defaults
                    and fn.__kwdefaults__ is kwdefaults
                    and not fn.__dict__
                    and (
                        kwvalues is None
                        or (
                            len(kwdefaults) == len(kwvalues)
                            and all(map(_is, kwdefaults.values(), kwvalues))
                        )
                    )
                )
            else:
                current = (
                    all(map(_is, map(_contents, cells), contents))
                    and all(map(_is, map(_code, fn), code))
                    and all(map(_is, map(_defaults, fn), defaults))
                    and all(map(_is, map(_kwdefaults, fn), kwdefaults))
                    and not any(map(len, map(_attrs, fn)))
                )
            if context is not None and current:
                x64, device = context
                current = _X64.value is x64 and (
                    device is _ONE_DEVICE or _DEVICE.value is device
                )
        except ValueError:  # a cell emptied by `del`
            current = False
        if not current:
            call, first, tree = self._slow(len(args))
        elif _VERIFY.on:
            kept = None if snapshot is None else snapshot.lifted
            _check_cached(self._fn, self._lift, first, tree, kept)
        _CALLING.treedef = tree
        try:
            return call(first, *args, **kwargs)
        except (TypeError, ValueError) as err:
            if isinstance(err, LiftError) and err.static_names is not None:
                raise under_lift_jit(err) from None
            better = explain_call_error(
                self._fn, self.program.static_names, err, args, kwargs
            )
            if better is None:
                raise
            try:
                raise better from err
            finally:
                del better  # not kept by this frame (its traceback holds it)

    def lower(self, *args: _P.args, **kwargs: _P.kwargs) -> Lowered:
        """Lower for the given arguments, as `jax.jit(fn).lower(...)` does.

        The result describes `fn`'s own arguments, and its `compile()` is called
        with them: the captures, parameters of the shared program, are bound to
        the values they hold now.
        """
        return self._lower((), args, kwargs)

    def trace(self, *args: _P.args, **kwargs: _P.kwargs) -> Traced:
        """Trace for the given arguments, as `jax.jit(fn).trace(...)` does.

        `jax.export.export(lift.jit(fn))` goes through here, and exports `fn` with
        its captures as constants: the exported function takes `fn`'s arguments.
        """
        return self._trace((), args, kwargs)

    def _lower(
        self, bound: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Lowered:
        call, first, _CALLING.treedef = self._entry(
            self._lifted(), len(bound) + len(args)
        )
        try:
            inner = call.lower(first, *bound, *args, **kwargs)
        except LiftError as err:
            raise under_lift_jit(err) from None
        return Lowered(inner, (first, *bound))

    def _trace(
        self, bound: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Traced:
        lifted = self._lifted()
        call, first, _CALLING.treedef = self._entry(lifted, len(bound) + len(args))
        try:
            inner = call.trace(first, *bound, *args, **kwargs)
        except LiftError as err:
            raise under_lift_jit(err) from None
        program = self.program

        def alone() -> Any:
            return program.bake(lifted, *bound).trace(*args, **kwargs)

        return Traced(inner, (first, *bound), alone)

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> Self: ...
    @overload
    def __get__(self, instance: object, owner: type | None = None) -> Any: ...
    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return _BoundJitFunction(self, instance)

    # Copies share the program (compiled code, one per code object anyway) and
    # watch their function afresh.
    def __copy__(self) -> Self:
        new = object.__new__(type(self))
        new._setup(self._fn, self.program, self._lift_options)
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        new = object.__new__(type(self))
        fn = copy.deepcopy(self._fn, memo)
        new._setup(fn, self.program, copy.deepcopy(self._lift_options, memo))
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new

    def __repr__(self) -> str:
        return f"<lift.jit {describe(self._fn)}>"

    def __getattr__(self, name: str) -> Any:
        # A `JitFunction` rebuilt from its leaves has the `Lifted` as `fn`, and
        # reads the function's name and other attributes there.
        if name.startswith("__") and name.endswith("__") and name not in _FN_ATTRS:
            raise AttributeError(name)
        return getattr(self._fn, name)


_FN_ATTRS: Final = frozenset({"__name__", "__qualname__", "__annotations__"})


# A `lift.jit` function is a pytree whose one child is the function lifted, and
# whose aux data is the shared program: captured by another lifted function (a
# step calling a jitted helper), its dynamic captures are leaves of that one.
def _flatten(x: JitFunction[Any, Any]) -> tuple[tuple[Any], Program]:
    return (x._lifted(),), x.program  # pyright: ignore[reportPrivateUsage]


def _flatten_with_keys(
    x: JitFunction[Any, Any],
) -> tuple[tuple[tuple[Any, Any]], Program]:
    (lifted,), program = _flatten(x)
    return ((jax.tree_util.GetAttrKey("__wrapped__"), lifted),), program


def _unflatten(program: Program, children: Iterable[Any]) -> JitFunction[Any, Any]:
    # JAX may unflatten with placeholders for leaves: store, never inspect.
    (lifted,) = children
    self = cast("JitFunction[Any, Any]", object.__new__(JitFunction))
    self._setup(lifted, program, {})  # pyright: ignore[reportPrivateUsage]
    return self


jax.tree_util.register_pytree_with_keys(  # pyright: ignore[reportUnknownMemberType]
    JitFunction, _flatten_with_keys, _unflatten, _flatten
)


# Captured by a function, a `lift.jit` function is a node of the graph, like a
# partial: its function's captures are watched with the rest, and a `lift.jit`
# closure that calls itself is a cycle the graph closes.
def _holder_static(x: JitFunction[Any, Any]) -> Any:
    options = x._lift_options  # pyright: ignore[reportPrivateUsage]
    return (x.program, tuple(sorted(options.items())) if options else ())


def _holder_parts(x: JitFunction[Any, Any]) -> Iterator[tuple[Label, Any]]:
    yield Label.of(WRAPPED), x._fn  # pyright: ignore[reportPrivateUsage]


def _holder_rebuild(static: Any, values: list[Any]) -> JitFunction[Any, Any]:
    program, options = static
    return JitFunction(values[0], program, dict(options))


register_holder(
    Holder(JitFunction, "lift.jit", _holder_static, _holder_parts, _holder_rebuild)
)


class _BoundJitFunction:
    # A `lift.jit` method bound to an instance, which is its first argument. (No
    # docstring: `__doc__` is the method's.)

    __slots__ = ("__func__", "__self__")

    def __init__(self, func: JitFunction[..., Any], instance: object) -> None:
        self.__func__ = func
        self.__self__ = instance

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__func__(self.__self__, *args, **kwargs)

    # Ahead of time, the instance is bound as it is to the method: what these
    # return take and describe the method's other arguments.
    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        return self.__func__._lower((self.__self__,), args, kwargs)  # pyright: ignore[reportPrivateUsage]

    def trace(self, *args: Any, **kwargs: Any) -> Traced:
        return self.__func__._trace((self.__self__,), args, kwargs)  # pyright: ignore[reportPrivateUsage]

    @property
    def __wrapped__(self) -> Any:
        return types.MethodType(self.__func__.__wrapped__, self.__self__)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.__wrapped__)

    @property
    def __doc__(self) -> str | None:  # pyright: ignore[reportIncompatibleVariableOverride]
        return self.__func__.__doc__

    @property
    def __module__(self) -> str:  # pyright: ignore[reportIncompatibleVariableOverride]
        return self.__func__.__module__

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__func__, name)

    def __repr__(self) -> str:
        return (
            f"<bound lift.jit {describe(self.__func__._fn)} of {self.__self__!r:.60}>"  # pyright: ignore[reportPrivateUsage]
        )


# -- the public function ------------------------------------------------------------

_LIFT_OPTIONS: Final = ("static", "dynamic")


@overload
def jit(fn: Callable[_P, _R], /, **jit_kwargs: Any) -> JitFunction[_P, _R]: ...
@overload
def jit(
    fn: None = None, /, **jit_kwargs: Any
) -> Callable[[Callable[_P, _R]], JitFunction[_P, _R]]: ...
def jit(fn: Callable[_P, _R] | None = None, /, **jit_kwargs: Any) -> Any:
    """`jax.jit` for closures: one compiled program per code, not per function object.

    The function is lifted (see [`lift.lift`][]) and passed to a program shared by
    every function with the same code and static captures; its dynamic captures
    (arrays, Python floats, ...) are parameters of that program. So closures made
    anew for each hyperparameter compile once, and their programs lower to the
    same text, which JAX's persistent compilation cache serves across processes.

    Captures are read when the function is called, as Python reads them: a
    captured variable bound or rebound after decoration is seen at the next call
    (a dynamic one without retracing), and so are defaults, keyword-only
    defaults and function attributes changed in place, and a change of
    `jax_enable_x64` or of the default device; so are a function's `__code__`
    replaced (as IPython's autoreload does) and a captured `functools.partial`'s
    keywords changed in place. Changes inside a captured container or object
    are not seen by a call that does not trace: `config['lr'] = 0.5` on a
    captured dict, an optimizer updating a captured `nnx` model in place, a
    list mutated in place (seen when the program traces, as the list is the
    user's own). Seeing them would walk every captured object on every call;
    such a call serves what was lifted last, and `lift.verifying()` reports
    it. `jax.jit` sees neither kind of change. Rebind the variable (`config =
    {**config, 'lr': 0.5}`) to have it lifted again, or pass the object as an
    argument (a model to `nnx.jit`, or to the `lift.jit` function).

    ```python
    import jax.numpy as jnp
    import lift

    traces = 0

    def make_step(lr):
        @lift.jit
        def step(w, g):
            global traces
            traces += 1
            return w - lr * g
        return step

    w = jnp.ones(3)
    for lr in (0.1, 0.01, 0.001):
        w = make_step(lr)(w, jnp.ones(3))
    assert traces == 1  # one program for every learning rate
    ```

    Use it as `@lift.jit`, `@lift.jit(static_argnames=("n",))` or
    `lift.jit(fn, ...)`, on functions, bound methods, `functools.partial`s, and
    on methods of pytree classes (an `equinox.Module`, a registered dataclass),
    where `self` is the first argument.

    **Arguments:**

    - `fn`: the function to compile.
    - `**jit_kwargs`: `jax.jit`'s options (`static_argnums`, `static_argnames`,
      `donate_argnums`, `donate_argnames`, `in_shardings`, `out_shardings`,
      `keep_unused`, ...), with argument numbers and names relative to `fn`'s own
      parameters; and `lift`'s `static=`/`dynamic=` for what `fn` captures.

    **Returns:** a callable with `fn`'s name, docstring and signature, and
    `.lower(...)` and `.trace(...)` as a `jax.jit` function has: their stages
    take and describe `fn`'s own arguments (the captures bound to what they hold
    then), and `jax.export.export` exports `fn` with its captures as constants.

    **Raises:** `lift.LiftError` when an option names no parameter of `fn`, or
    marks one both static and donated.
    """
    if fn is not None and not jit_kwargs:  # `@lift.jit`, the common case
        return _decorate(fn, jit_kwargs, (), {})
    lift_options = {k: jit_kwargs.pop(k) for k in _LIFT_OPTIONS if k in jit_kwargs}
    key = options_key(jit_kwargs)

    def decorator(fn: Callable[_P, _R]) -> JitFunction[_P, _R]:
        return _decorate(fn, jit_kwargs, key, lift_options)

    if fn is None:
        return decorator
    return decorator(fn)


def _shown(x: Any) -> str:
    try:
        return f"{x!r:.60}"
    except Exception:
        return f"<{type(x).__name__} object>"


def _decorate(
    fn: Callable[_P, _R],
    jit_kwargs: dict[str, Any],
    options_key: Any,
    lift_options: dict[str, Any],
) -> JitFunction[_P, _R]:
    if issubclass(type(fn), JitFunction):
        fn = cast("JitFunction[_P, _R]", fn).__wrapped__
    elif type(fn) is not types.FunctionType and not callable(fn):
        raise LiftError(
            f"lift.jit() got {type(fn).__qualname__} {_shown(fn)}, which is not "
            "callable.\nFix: decorate a function: `@lift.jit` above its `def`.",
            anchor="jit-not-callable",
        )
    return JitFunction(fn, program(fn, jit_kwargs, options_key), lift_options)
