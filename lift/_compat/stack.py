"""Tracebacks and the stack: JAX's traceback filtering, the user's stack
level for warnings, and whether a `__hash__` runs as `jax.jit` hashes a static
argument.
"""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

# -- Tracebacks JAX has not filtered ---------------------------------------------
#
# Written against jax 0.10.2. `api_boundary` (jax/_src/traceback_util.py) drops
# JAX's frames from an exception's traceback, and with them the frames that tell
# JAX's leak report (and its jax#26560 IndexError) from the user's own error.
# Leak checking runs with filtering off and filters afterwards, as the outermost
# `api_boundary` would have, the exceptions it lets through.
from jax._src import (
    config as _config,
    source_info_util as _source_info_util,
    traceback_util as _traceback_util,
)

from .._base.owners import is_user_module

_C = TypeVar("_C", bound=Callable[..., Any])


def hide_frames_of(path: str) -> None:
    """Leave the frames of the module at `path` out of the tracebacks JAX
    filters and out of the source lines it gives operations.

    JAX leaves out its own frames the same way. The module calls the user's
    function inside a trace; flax and equinox do the same for such modules.
    Written against jax 0.10.2 (`register_exclusion` in both modules), 0.8.0
    and 0.12.1."""
    _traceback_util.register_exclusion(path)  # pyright: ignore[reportUnknownMemberType]
    _source_info_util.register_exclusion(path)  # pyright: ignore[reportUnknownMemberType]


# lift's own frames, as JAX's: left out of the tracebacks JAX filters.
_traceback_util.register_exclusion(os.path.dirname(os.path.dirname(__file__)))


def entry_point(fun: _C) -> _C:
    """`fun`, whose exceptions leave it as `user_frames` leaves them."""

    @functools.wraps(fun)  # pyright: ignore[reportArgumentType]
    def entry(*args: Any, **kwargs: Any) -> Any:
        try:
            return fun(*args, **kwargs)  # pyright: ignore[reportCallIssue]
        except Exception as exc:
            user_frames(exc)
            raise

    return cast(_C, entry)


def user_frames(exc: BaseException) -> None:
    """Leave lift's frames and JAX's out of `exc`'s traceback.

    JAX does so at its outermost entry point. Each public entry point of lift
    calls it as `exc` leaves. The outermost one's cut is what the user sees.
    Only JAX adds its note about it."""
    filter_traceback(exc, filtering_mode(), note=False)


def filtering_mode() -> str:
    """The traceback filtering JAX applies now ("auto" resolved)."""
    return str(_traceback_util._filtering_mode())  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]


def full_tracebacks() -> Any:
    """A context in which JAX leaves exception tracebacks whole."""
    return _config.traceback_filtering("off")  # pyright: ignore[reportUnknownMemberType]


def filter_traceback(exc: BaseException, mode: str, note: bool = True) -> None:
    """Filter `exc`'s traceback as JAX's `api_boundary` does in `mode`."""
    tb = exc.__traceback__
    if tb is None or mode == "off" or _traceback_util._is_under_reraiser(exc):  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]
        return
    if mode == "tracebackhide":
        _traceback_util._add_tracebackhide_to_hidden_frames(tb)  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]
        return
    entries: list[types.TracebackType] = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    include = _traceback_util.include_frame  # pyright: ignore[reportUnknownMemberType]
    kept = [e for e in entries if include(e.tb_frame)]
    if len(kept) == len(entries):
        return  # no frame of JAX or lift in it: nothing to remove
    # As `filter_traceback`, but each entry keeps its own instruction (the frame's
    # current one has moved on since: it is handling this exception).
    out: types.TracebackType | None = None
    for e in reversed(kept):
        out = types.TracebackType(out, e.tb_frame, e.tb_lasti, e.tb_lineno)
    exc.with_traceback(out)
    if mode == "quiet_remove_frames" and note:
        exc.add_note("--------------------\n" + _traceback_util._simplified_tb_msg)  # pyright: ignore[reportPrivateUsage, reportUnknownMemberType]


# The frames in which `jax.jit` hashes its static arguments on a cache miss (it
# hashes the jitted function there too, as `fun`). Written against jax 0.10.2
# (`pjit._infer_params`) and 0.8.0 (`pjit._infer_params_internal`).
_PJIT_FILE: Final = os.path.join("jax", "_src", "pjit.py")
_HASHES_STATIC_ARGS: Final = frozenset({"_infer_params", "_infer_params_internal"})


_HASH_DEPTH: Final = 8  # `__hash__` methods nested inside one another, at most


def user_stacklevel(frame: types.FrameType) -> int:
    """The `stacklevel` that makes a warning issued by the function `frame`
    called point at the user's code.

    It goes past the libraries' frames (`is_user_module`) and `__hash__`
    methods (an object hashing what it holds), to the call that caused them."""
    level = 2
    current: types.FrameType | None = frame
    while current is not None and (
        current.f_code.co_name == "__hash__"
        or not is_user_module(current.f_globals.get("__name__"))
    ):
        current = current.f_back
        level += 1
    return level if current is not None else 2


def hashed_as_jit_static(obj: object, frame: types.FrameType) -> bool:
    """Whether `frame`, the caller of `obj.__hash__`, is `jax.jit` hashing `obj`
    as a static argument (or inside one). The alternative is `obj` as the
    function it jits (`jax.jit(obj)`, `jax.jit(obj.method)`).

    Inside a container hashed in C (a tuple) the caller is `jax.jit`'s own
    frame. Inside an object whose `__hash__` is written in Python (a frozen
    dataclass, an `equinox.Module`) the caller is that `__hash__`. Then
    `jax.jit` is further up, past such frames (at most `_HASH_DEPTH`): it
    hashed the outermost object.
    """
    hashed: object = obj
    for _ in range(_HASH_DEPTH + 1):
        code = frame.f_code
        if code.co_name != "__hash__":
            return (
                code.co_name in _HASHES_STATIC_ARGS
                and code.co_filename.endswith(_PJIT_FILE)
                and not _is_jitted(frame, hashed)
            )
        back = frame.f_back
        if back is None:
            return False
        hashed, frame = frame.f_locals.get("self"), back
    return False


def _is_jitted(frame: types.FrameType, obj: object) -> bool:
    """Whether `obj` is the function `jax.jit` hashes in `frame` (`fun`), or the
    instance or function of that bound method."""
    fun = frame.f_locals.get("fun")
    return fun is obj or any(
        getattr(fun, attr, None) is obj for attr in ("__self__", "__func__")
    )
