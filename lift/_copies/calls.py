"""The function a `Lifted` rebuilds around its leaves, and how a call uses it.

A `Lifted` builds its function at its first call. The calls after it share
that build. A build may hold copies: lists, dicts and mutable nodes lift
rebuilt (`lift._copies.copies`). Then the call using it claims it, and checks
the copies it used and no other call's. A call that finds the shared build in
use runs a build of its own: another thread's call, a recursive call, or a
generator not finished holds it. A generator or coroutine runs its body after
the call returns. Its build is claimed when the body starts, and checked when
it finishes (`lift._copies.generators.watched`).
"""

from __future__ import annotations

import functools
import inspect
import threading
import types
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from .. import _compat
from .._base.errors import code_of
from .._skeleton.nodes import Template
from .._skeleton.rebuild import build_nodes
from .._skeleton.skeleton import (
    LiftedParts,
    Skeleton,
    arrays_of,
    drop_built,
    explain,
    skeleton_of,
)
from .callbacks import Kept, made_since, mark, refuse_kept
from .copies import Copies, Copy, changed_copy, copies_in, refuse_changed
from .generators import watched
from .own import pin_kept

# A function with these flags returns a generator, coroutine or async generator
# whose body runs after the call.
_LAZY: Final = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


class Build(NamedTuple):
    """A function rebuilt around the leaves, with the copies it holds.

    One value: a thread never pairs one build's function with another's copies."""

    fn: Callable[..., Any]
    copies: Copies
    # Of the build the calls share, when it holds copies: held by the call
    # using them, so that no other call's changes are mixed in.
    busy: threading.Lock | None
    # A generator or coroutine function holding copies: its body runs, and
    # is checked, after the call returns.
    lazy: bool
    # The functions rebuilt, when it holds copies (`lift._copies.callbacks`).
    functions: tuple[Any, ...] = ()


def new_build(skeleton: Skeleton, leaves: tuple[Any, ...], *, shared: bool) -> Build:
    """The function of `skeleton` rebuilt around `leaves`, with its copies.

    With `shared`, the calls share it and each claims its copies in turn
    (`claim`)."""
    made: list[tuple[Template, Any]] = []
    objs = build_nodes(skeleton, leaves, made)
    fn = objs[0]
    copies = copies_in(made, leaves, objs, skeleton)
    if not copies:
        return Build(fn, copies, None, False)
    code = code_of(fn)
    lazy = code is not None and bool(code.co_flags & _LAZY)
    functions = tuple(o for o in objs if type(o) is types.FunctionType)
    return Build(fn, copies, threading.Lock() if shared else None, lazy, functions)


def call_pinning(
    skeleton: Skeleton,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """A call of `fn`, rebuilt from `skeleton` around no copy.

    Traced, your own containers that a callback it leaves reaches are pinned
    (`lift._copies.own.pin_kept`): they get programs of their own."""
    if _compat.eager() or not skeleton.own:
        return fn(*args, **kwargs)
    begun = mark()
    out = fn(*args, **kwargs)
    if made_since(begun):
        pin_kept(skeleton.nodes, code_of(fn))
    return out


def call_watched(
    owner: LiftedParts, shared: Build, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """A call of a function holding copies, checked after it returns or raises.

    It checks the copies it used and no other call's. A generator's or
    coroutine's body is checked when it finishes."""
    if shared.lazy:

        def start() -> tuple[Any, Callable[[BaseException | None], None]]:
            # The body starts: it claims a build, as a call does when it begins.
            built = claim(owner, shared)
            return built.fn(*args, **kwargs), functools.partial(finish, owner, built)

        return watched(shared.fn(*args, **kwargs), start)
    built = claim(owner, shared)
    # While a transform traces the call, a function it leaves holding a copy
    # (a callback JAX keeps in the program) would reach lift's copy at run time.
    # The count of JAX's callbacks says whether the call made one (`Kept`).
    # Your own containers it reaches are pinned, as in `call_pinning`.
    outlived = None
    try:
        kept = None if _compat.eager() else Kept(built.copies, built.functions)
        out = built.fn(*args, **kwargs)
        if kept is not None and made_since(kept.begun):
            # One pass over the heap for both looks.
            callbacks = functools.cache(_compat.kept_callbacks)
            outlived = kept.outlived(callbacks)
            pin_kept(skeleton_of(owner).nodes, code_of(built.fn), callbacks)
            del callbacks  # what it found is not kept past the looks
    except BaseException as err:
        # A call that changed a copy and then raised is refused too, its
        # error chained: raising must not hide the lost change.
        finish(owner, built, err)
        if isinstance(err, Exception):
            explain(owner, err)
        raise
    finish(owner, built, None)
    if outlived is not None:
        drop_built(owner, built)
        raise refuse_kept(built.fn, outlived)
    return out


def claim(owner: LiftedParts, shared: Build) -> Build:
    """The build a call runs: `shared`, unless another call uses its copies.

    Then the call gets a build of its own, and checks only the copies it used.
    `shared` is checked first. A copy changed since the last call returned
    (through a value that call gave out) is refused."""
    busy = shared.busy
    if busy is None or not busy.acquire(blocking=False):
        return new_build(skeleton_of(owner), arrays_of(owner), shared=False)
    changed = _changed(owner, shared)
    if changed is None:
        return shared
    raise refuse_changed(changed, between_calls=True)


def finish(owner: LiftedParts, built: Build, cause: BaseException | None) -> None:
    """After the call that ran `built` returned or raised `cause`.

    The copies are freed for the next call, or a changed copy is refused,
    chained to `cause`. A call stopped by `KeyboardInterrupt` or `SystemExit`
    drops a changed copy, and that exception goes on. The refusal is raised,
    not returned: an exception in a caller's local is a cycle through its
    traceback."""
    changed = _changed(owner, built)
    if changed is None:
        if built.busy is not None:
            built.busy.release()
        return
    if cause is None or isinstance(cause, Exception | GeneratorExit):
        raise refuse_changed(changed) from (
            cause if isinstance(cause, Exception) else None
        )


def _changed(owner: LiftedParts, built: Build) -> Copy | None:
    """The first copy of the claimed `built` that changed.

    A changed build, or one whose check raised, is dropped and stays claimed.
    The next call builds the function afresh, unless another call replaced it
    already. A call that read it before it was dropped builds its own. So no
    call finds the change and blames it on the calls before."""
    unchanged = False
    try:
        changed = changed_copy(built.copies)
        unchanged = changed is None
    finally:
        if not unchanged:
            drop_built(owner, built)
    return changed
