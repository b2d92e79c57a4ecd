"""Leak checking around calls: `lift.checked(transform)` and `lift.checking_leaks()`."""

from __future__ import annotations

import functools
import gc
import sys
import traceback
import types
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from typing import Any, Final, NamedTuple, ParamSpec, TypeVar, cast

import jax

from .. import _compat
from .._base.built import recording
from .._base.errors import LeakError, LiftError, describe
from .._base.owners import is_user_module
from .caches import CacheHolders, closure_holding, holder_kinds, split_cached
from .chain import referrer_chain
from .report import Leak, Unopened, format_leaks, tracer_text
from .scan import param_name, scan_tracers

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _frame_roots(tb: types.TracebackType | None) -> Iterator[tuple[str, Any]]:
    """Named roots for a scan: the locals of the user's frames in a traceback."""
    for frame in dict.fromkeys(f for f, _ in traceback.walk_tb(tb)):
        if is_user_module(frame.f_globals.get("__name__")):
            yield from _caller_roots(frame)


def _modules(user: bool = True) -> list[tuple[str, Any]]:
    """The imported modules, by name: the user's (`is_user_module`: not JAX's,
    lift's, NumPy's, pytest's or the standard library's). Without `user`,
    every one but lift's own: where a library keeps a tracer (the last place
    a report looks)."""
    return [
        (name, module)
        for name, module in list(sys.modules.items())
        if type(cast(object, module)) is types.ModuleType
        and (is_user_module(name) if user else name.partition(".")[0] != "lift")
    ]


def lifted_roots(bucket: Iterable[Any]) -> list[tuple[str, Any]]:
    return [(getattr(obj, "__qualname__", "lifted"), obj) for obj in list(bucket)]


def scan_confirmed(
    roots: Callable[[], list[tuple[str, Any]]], unopened: list[Unopened]
) -> tuple[list[Leak], list[Any]]:
    """`scan_tracers` of `roots()`, confirmed after a garbage collection.

    A `Lifted` recorded weakly that only unreachable garbage holds did not
    escape: JAX's checker collects first. So leaks found are looked for
    again, in `roots()` read anew, after a collection that only a suspected
    leak costs."""
    leaks, tracers = scan_tracers(roots(), unopened=unopened)
    if not leaks:
        return leaks, tracers
    del leaks, tracers
    unopened.clear()
    gc.collect()
    return scan_tracers(roots(), unopened=unopened)


def _place(
    tracers: list[Any],
    rounds: list[Callable[[], Iterable[tuple[str, Any]]]],
    home: str | None = None,
    unopened: list[Unopened] | None = None,
    weak: bool = True,
) -> tuple[list[Leak], list[Any], list[Any]]:
    """Leak reports for `tracers`, each named from the first round of roots that
    reaches it; the tracer of each; and the tracers no round reached. `unopened` receives what the
    rounds could not open. Without `weak`, through strong holders only."""
    leaks: list[Leak] = []
    named: list[Any] = []  # the tracer of each leak
    rest = tracers
    for roots in rounds:
        if not rest:
            break
        found, placed = scan_tracers(
            roots(), only=rest, home=home, unopened=unopened, weak=weak
        )
        leaks.extend(found)
        named.extend(placed)
        ids = set(map(id, placed))
        rest = [t for t in rest if id(t) not in ids]
    return leaks, named, rest


class Placed(NamedTuple):
    """Where escaped tracers are (`place_escaped`).

    `leaks` are named, `named` their tracers, one each. `unplaced` are held by
    nothing lift can see. `cached` names the libraries' caches that alone keep
    `kept` alive: no leak of the code under test."""

    leaks: list[Leak]
    named: list[Any]
    unplaced: list[Any]
    cached: CacheHolders | None
    kept: list[Any]


def place_escaped(
    tracers: list[Any],
    roots: list[tuple[str, Any]],
    home: str | None = None,
    unopened: list[Unopened] | None = None,
) -> Placed:
    """Leak reports for tracers known to have escaped: their trace exited and
    they are still alive.

    Each is named from `roots` first, then from the user's modules. Of the
    rest, those that libraries' caches keep (JAX's, equinox's) are set apart:
    they are not the user's escapes. The others are then named from any
    module. `home`: the module of the roots (`scan_tracers`).

    Named by their strong holders only: a weak reference keeps nothing alive
    (equinox's weak-keyed `filter_jit` cache reaches a closure that JAX's own
    cache keeps)."""
    rounds: list[Callable[[], Iterable[tuple[str, Any]]]] = [lambda: roots, _modules]
    leaks, named, rest = _place(tracers, rounds, home, unopened, weak=False)
    cached, others = split_cached(rest) if rest else (None, [])
    left = {id(t) for t in others}
    kept = [t for t in rest if id(t) not in left]
    # A library's objects that cannot be opened are not the user's to act on.
    found, more, unplaced = _place(others, [lambda: _modules(False)], home, weak=False)
    return Placed(leaks + found, named + more, unplaced, cached, kept)


def unseen_error(tracers: list[Any], where: str) -> LeakError:
    """The error for escaped tracers that no variable lift can see holds: the
    closures holding them, where there are such, else the tracers."""
    leaks = [x for t in tracers if (x := closure_holding(t)) is not None]
    if leaks and len(leaks) == len(tracers):
        return LeakError(format_leaks(leaks), anchor="leak-report")
    kinds = holder_kinds(tracers, [leaks])
    held = f" (held by {', '.join(kinds[:4])}: objects lift does not open)"
    chains = "".join(
        f"\n  {tracer_text(t)}: referrers, from the tracer up: "
        + " <- ".join(referrer_chain(t, ignore=[tracers, leaks]))
        for t in tracers[:3]
    )
    return LeakError(
        f"{len(tracers)} tracer(s) of transforms that exited {where} are still "
        f"alive, held by no variable lift can see: "
        f"{', '.join(map(tracer_text, tracers[:3]))}{held if kinds else ''}. Return "
        f"the value from the transformed function instead of storing it.{chains}",
        anchor="leak-unseen",
    )


def _caller_roots(frame: types.FrameType) -> list[tuple[str, Any]]:
    """Named roots for a scan: the locals of `frame` and the globals its code
    names (the block that ran inside `checking_leaks()`, a failing frame)."""
    glob = frame.f_globals
    roots = [(k, v) for k, v in _compat.frame_locals(frame) if v is not glob]
    roots.extend((k, glob[k]) for k in frame.f_code.co_names if k in glob)
    return roots


def _translate(
    exc: BaseException,
    named: list[tuple[str, Any]],
    lifted: list[tuple[str, Any]],
    escaped: list[Any] = [],  # noqa: B006 (never mutated)
) -> LeakError | None:
    """A `LeakError` for JAX's leaked-tracer error, or `None` for any other
    exception.

    `escaped`: tracers of eager transforms that exited inside a
    `checking_leaks()` block. JAX raises `UnexpectedTracerError` when one of
    them is used later. It is reported as their leak when lift can name where
    they are.

    JAX's error may also be the one its checker raised explaining it:
    jax#26560's IndexError, or a holder's `__repr__`'s. Any other exception
    is the user's own, and passes unchanged.

    Only the tracers JAX named are reported. The locals of the frames the
    error unwound hold other tracers of exited traces (the outer function's
    argument). Those die with the traceback and are no leak. Where lift cannot
    place them, JAX's message is kept: the `LeakError` is raised from JAX's
    exception.
    """
    jax_tracers = _compat.jax_leaked_tracers(exc)
    used = bool(escaped) and isinstance(exc, jax.errors.UnexpectedTracerError)
    if jax_tracers is None and not used:
        return None
    # Named from where the user holds them first (`_REGISTRY[0]`, `state.tx`):
    # the failing frames and the checked function (its globals), then the
    # user's modules' globals; only then from the `Lifted` built during the
    # call, which would otherwise be the shortest path and name no holder.
    # `escaped`: tracers of eager transforms that exited in the block (one may
    # hold JAX's tracer: a `grad` tracer stored inside `jit`).
    unopened: list[Unopened] = []
    leaks, _, _ = _place(
        [*(jax_tracers or []), *escaped],
        [
            lambda: [*_frame_roots(exc.__traceback__), *named],
            _modules,
            lambda: lifted,
        ],
        unopened=unopened,
    )
    if jax_tracers is None and not leaks:  # an escaped tracer used, not named
        return None
    if jax_tracers is None:  # an escaped tracer used later: its leak, named
        error = LeakError(format_leaks(leaks, unopened), anchor="leak-report")
        error.__cause__ = exc
        return error
    cached, uncached = split_cached(jax_tracers) if not leaks else (None, [])
    if cached is not None and not uncached:
        # Retained by JAX's caches (an eager `grad` over a function that jits a
        # closure over its argument): JAX's checker cannot tell that from a leak.
        error = LeakError(
            f"JAX's checker reported {len(jax_tracers)} tracer(s) that no "
            f"variable of the code under test holds: {cached}. JAX's checker "
            "cannot tell a cache from a leak: run this without it (lift's "
            "pytest plugin, in its default mode, leaves it off and does not "
            "report such tracers), or exempt the test "
            "(@pytest.mark.lift_allow_leaks).",
            anchor="leak-unseen",
        )
        error.__cause__ = exc
        return error
    if not leaks:
        leaks = [x for t in jax_tracers if (x := closure_holding(t)) is not None]
    if leaks:
        return LeakError(format_leaks(leaks, unopened), anchor="leak-report")
    if not _compat.is_leak_report(exc):
        # JAX's checker failed explaining its report (jax#26560's IndexError,
        # or a holder's `__repr__` raising): its message says nothing of the
        # tracer.
        what = ", ".join(map(tracer_text, jax_tracers[:3])) or "a tracer"
        source = "JAX's checker failed while explaining it, jax issue 26560"
    else:
        what = _compat.leaked_tracer_text(exc)
        source = "JAX's report follows, above"
    error = LeakError(
        "JAX found a tracer that escaped its transform, held by no variable "
        f"lift can see from the failing frames: {what.strip()}. Return the "
        "value from the transformed function instead of storing it, or lift "
        f"the closure that captured it ({source}).",
        anchor="leak-unseen",
    )
    error.__cause__ = exc  # kept: JAX's reference chain says more than lift can
    return error


def leak_error(
    exc: Exception,
    named: list[tuple[str, Any]],
    lifted: list[tuple[str, Any]],
    mode: str,
    escaped: list[Any] = [],  # noqa: B006 (never mutated)
) -> None:
    """Raise the `LeakError` for JAX's error `exc`; for any other, filter its
    traceback as JAX would have (in `mode`) and return: the caller re-raises it.
    `escaped`: as `_translate`'s."""
    __tracebackhide__ = True
    error = _translate(exc, named, lifted, escaped)
    if error is None:
        _compat.filter_traceback(exc, mode)
        return
    try:
        raise error from error.__cause__
    finally:
        del error  # not kept by this frame (its traceback holds it)


def describe_short(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None)
    return name if isinstance(name, str) else type(fn).__name__


class checking_leaks:
    """Check for leaked tracers over a block or a function.

    For its extent, turns on `jax.checking_leaks()`. It reports JAX's
    leaked-tracer errors as [`lift.LeakError`][] with lift's diagnosis:
    function, `file:line`, variable, fix. It never shows the `IndexError` of
    jax issue 26560. On exit it scans every `Lifted` built inside it that is
    still alive after a garbage collection.

    Usable as `with lift.checking_leaks():` and as `@lift.checking_leaks()`.

    ```python
    import jax
    import lift

    STASH = []

    def step(x):
        STASH.append(x)
        return x * 2

    try:
        with lift.checking_leaks():
            jax.jit(step)(1.0)
    except lift.LeakError as e:
        print(e)
    ```

    ```text
    1 tracer escaped the transform that created it:
      STASH[0]: float32[] from jit(step) — return the value from the transformed function instead of storing it
    Docs: python -m lift explain leak-report
    ```
    """

    def __init__(self, fn: None = None, /) -> None:
        if cast(object, fn) is not None:  # `@lift.checking_leaks`, no parentheses
            raise LiftError(
                f"@lift.checking_leaks is used without parentheses, on "
                f"{describe(fn)}.\nFix: `@lift.checking_leaks()`, or `with "
                "lift.checking_leaks():` around a block.",
                anchor="checking-leaks-parentheses",
            )
        self._stacks: list[
            tuple[ExitStack, weakref.WeakSet[Any], str, dict[int, Any]]
        ] = []

    def __enter__(self) -> None:
        stack = ExitStack()
        mode = _compat.filtering_mode()
        stack.enter_context(jax.checking_leaks())
        stack.enter_context(_compat.snapshots_are_not_leaks())
        stack.enter_context(_compat.full_tracebacks())
        bucket = stack.enter_context(recording())
        # Eager `grad`/`jvp` traces, which JAX's checker does not look at.
        exits = stack.enter_context(_compat.watching_trace_exits())
        self._stacks.append((stack, bucket, mode, exits))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        __tracebackhide__ = True
        stack, bucket, mode, exits = self._stacks.pop()
        stack.close()
        # The `Lifted`s recorded (weakly) are read after the collections that
        # tell which traces escaped: garbage among them is no leak.
        escaped = _compat.escaped_tracers(exits)
        # The block's frame (none where C code called this, in a bare thread).
        frame = sys._getframe().f_back  # pyright: ignore[reportPrivateUsage]
        if exc is not None:
            if isinstance(exc, Exception):
                # JAX's report: the frames it unwound are below the block's.
                roots = _block_roots(frame)
                leak_error(exc, roots, lifted_roots(bucket), mode, escaped)
            return
        unopened: list[Unopened] = []
        leaks, tracers = scan_confirmed(lambda: lifted_roots(bucket), unopened)
        found = set(map(id, tracers))
        if escaped or tracers:
            # Named from the block's own frame (its locals, the globals its
            # code names), then as the plugin names them; those only JAX's
            # and lift's caches keep are not the block's escapes. A tracer a
            # `Lifted` built here holds is named from it when nothing else is.
            placed = place_escaped(
                [*tracers, *(t for t in escaped if id(t) not in found)],
                _block_roots(frame),
                unopened=unopened,
            )
            better = dict(zip(map(id, placed.named), placed.leaks, strict=True))
            leaks = [better.pop(id(t), x) for x, t in zip(leaks, tracers, strict=True)]
            leaks.extend(better.values())
            if placed.unplaced and not leaks:
                raise unseen_error(placed.unplaced, "inside lift.checking_leaks()")
        if leaks:
            raise LeakError(format_leaks(leaks, unopened), anchor="leak-report")

    def __call__(self, fn: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(fn)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            __tracebackhide__ = True
            with checking_leaks():
                return fn(*args, **kwargs)

        return wrapper


def _block_roots(frame: types.FrameType | None) -> list[tuple[str, Any]]:
    """Named roots of the block `frame` runs: its `_caller_roots`. As a
    decorator, the caller's, then the decorated function's arguments, each
    named by its parameter (`self`)."""
    args: list[tuple[str, Any]] = []
    while frame is not None and frame.f_code is _WRAPPER_CODE:
        if not args:  # the innermost wrapper's: its `fn` is the user's
            names = dict(_compat.frame_locals(frame))
            fn = names.get("fn")
            args = [(param_name(fn, i), v) for i, v in enumerate(names["args"])]
            args.extend(names["kwargs"].items())
        frame = frame.f_back
    return [*(_caller_roots(frame) if frame is not None else []), *args]


# The code of the function `checking_leaks()` makes as a decorator.
_WRAPPER_CODE: Final = next(
    c
    for c in checking_leaks.__call__.__code__.co_consts
    if isinstance(c, types.CodeType)
)
