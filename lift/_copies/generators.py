"""Generators and coroutines whose function holds copies.

Their body runs after the call returns. So the copies it uses
(`lift._copies.copies`) are checked when it finishes."""

from __future__ import annotations

import types
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator
from typing import Any, TypeAlias, cast

# One call of a rebuilt generator or coroutine function that holds copies,
# started when its body starts: the call made again, by the build whose copies
# it is to use, with what checks those copies once the body returned (`None`)
# or raised (`GeneratorExit` when it was closed).
Start: TypeAlias = Callable[[], tuple[Any, Callable[[BaseException | None], None]]]


def watched(made: Any, start: Start) -> Any:
    """A stand-in for `made`, checked when its body finishes.

    `made` is what a call of a rebuilt generator, coroutine or async generator
    function returned: its arguments bound, its body not started. The
    stand-in has the same kind and name, and runs the call `start` makes.
    `send`, `throw` and `close` (`asend`, `athrow`, `aclose`) reach it as they
    would reach `made`. The copies it used are checked when its body returns,
    raises or is closed. One never started starts nothing and checks nothing.
    `made` itself is closed, never run: a coroutine dropped unclosed would
    warn that it was never awaited."""
    t: type[Any] = type(made)  # pyright: ignore[reportUnknownVariableType]
    if t is types.GeneratorType:
        out: Any = _generator(start)
        made.close()
    elif t is types.CoroutineType:
        out = _coroutine(start)
        made.close()
    else:  # an async generator: dropped unstarted, `made` is silent
        out = _async_generator(start)
    # Named as yours, in reprs and in "coroutine ... was never awaited".
    out.__name__, out.__qualname__ = made.__name__, made.__qualname__
    return out


def _generator(start: Start) -> Generator[Any, Any, Any]:
    # `yield from` forwards `send`, `throw` and `close`, and the return value.
    made, finish = start()
    generator = cast("Generator[Any, Any, Any]", made)
    try:
        out: Any = yield from generator
    except BaseException as err:
        finish(err)
        raise
    finish(None)
    return out


async def _coroutine(start: Start) -> Any:
    # `await` forwards `send`, `throw` and `close` as `yield from` does.
    made, finish = start()
    coroutine = cast("Coroutine[Any, Any, Any]", made)
    try:
        out = await coroutine
    except BaseException as err:
        finish(err)
        raise
    finish(None)
    return out


async def _async_generator(start: Start) -> AsyncGenerator[Any, Any]:
    # No `yield from` in an async generator: what it would do, by hand.
    made, finish = start()
    generator = cast("AsyncGenerator[Any, Any]", made)
    try:
        try:
            value = await generator.asend(None)
            while True:
                try:
                    sent = yield value
                except GeneratorExit:  # `aclose()`, or finalized
                    await generator.aclose()
                    raise
                except BaseException as err:  # `athrow(err)`
                    value = await generator.athrow(err)
                else:
                    value = await generator.asend(sent)
        except StopAsyncIteration:
            pass
    except BaseException as err:
        finish(err)
        raise
    finish(None)
