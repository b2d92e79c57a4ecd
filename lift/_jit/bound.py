"""A `lift.jit` function read from an instance: a method bound to it.

The instance is its first argument."""

from __future__ import annotations

import inspect
import types
from typing import Any

from .._base.errors import describe
from .._compat import entry_point, user_frames
from .aot import Lowered, Traced


class BoundJitFunction:
    # A `lift.jit` method bound to an instance, which is its first argument. (No
    # docstring: `__doc__` is the method's.)

    __slots__ = ("__func__", "__self__")

    def __init__(self, func: Any, instance: object) -> None:
        self.__func__ = func
        self.__self__ = instance

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.__func__(self.__self__, *args, **kwargs)
        except Exception as err:
            user_frames(err)  # this frame's too
            raise

    # Ahead of time, the instance is bound as it is to the method: what these
    # return take and describe the method's other arguments.
    @entry_point
    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        return self.trace(*args, **kwargs).lower()

    @entry_point
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
