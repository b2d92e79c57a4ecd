"""The library's exceptions, and the one way messages name a function and a
value's type."""

from __future__ import annotations

import functools
import inspect
import re
import sys
import types
from collections.abc import Callable, Iterable
from math import copysign
from typing import Any, Final, cast

# The documentation site's address, once it has one (ending in "/"). Every
# message's last line is `Docs: python -m lift explain <anchor>`, which prints
# the Errors page's entry from the copy shipped in the package; with an address
# here, the line also gives `<DOCS_URL>errors/#<anchor>`.
DOCS_URL: Final = ""

_ANCHOR = re.compile(r"\nDocs: python -m lift explain ([\w-]+)(?:, or \S+)?$")


class _Anchored(Exception):
    """A message that ends with where the Errors page explains it.

    `anchor` (keyword) is a heading id of `docs/errors.md`. The line
    `Docs: python -m lift explain <anchor>` ends the message. Every message
    raised in `lift/` names one; the tests check each raise site and each
    anchor.
    """

    anchor: str | None
    # The captures a message's fix keeps static (`static_fix`), if it has one.
    static_names: tuple[str, ...] | None = None

    def __init__(
        self,
        message: str = "",
        /,
        *,
        anchor: str | None = None,
        static: tuple[str, ...] | None = None,
    ) -> None:
        if anchor is not None and _ANCHOR.search(message) is None:
            message += docs_anchor(anchor)
        super().__init__(message)
        found = _ANCHOR.search(message)
        self.anchor = found[1] if found is not None else None
        if static is not None:
            self.static_names = static


class LiftError(_Anchored, TypeError):
    """Raised when `lift` cannot turn what it was given into a pytree.

    The message names the function, its `file:line`, the variable and the fix.
    Its last line is the command that prints the Errors page's entry,
    `python -m lift explain <anchor>` (the anchor is also `.anchor`).
    """


class LeakError(_Anchored, RuntimeError):
    """Raised when a tracer has escaped the transform that created it.

    The message lists every leak found. Each names the function holding it,
    its `file:line`, the captured variable and a fix.
    """


class LiftAttributeError(LiftError, AttributeError):
    """A `Lifted` has no such attribute.

    `hasattr` and `getattr(x, name, default)` see an `AttributeError`;
    `except lift.LiftError` sees lift's."""

    # `(lifted, name)` until the message is first read (see `missing_attribute`).
    _unwritten: tuple[Any, str] | None = None

    def __str__(self) -> str:
        if self._unwritten is not None:
            lifted, name = self._unwritten
            self._unwritten = None
            message = _missing_message(lifted, name)
            self.args = (message + docs_anchor(self.anchor or "lifted-a-factory"),)
        return super().__str__()

    def __reduce__(self) -> tuple[Any, ...]:
        # By function: the class's `__module__` is "lift", which does not export it.
        return (_attribute_error, (str(self),))


def _attribute_error(message: str) -> LiftAttributeError:
    return LiftAttributeError(message, anchor="lifted-a-factory")


LiftError.__module__ = "lift"
LiftAttributeError.__module__ = "lift"
LeakError.__module__ = "lift"


# Code of lift's that runs for a user's function (a closure-converted one
# runs the program traced from it): how to read the user's code from the
# function (`code_of(..., shown=True)`).
STANDS_FOR: dict[types.CodeType, Callable[[Any], types.CodeType | None]] = {}


def code_of(obj: Any, shown: bool = False) -> types.CodeType | None:
    """The code a callable runs, or `None`. With `shown`, the user's code it
    stands for (`STANDS_FOR`), where reports show it.

    It looks through bound methods, partials, `Lifted` and `lift.jit`
    functions, a bounded number of steps."""
    for _ in range(100):
        t: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
        if t is types.FunctionType:
            read = STANDS_FOR.get(obj.__code__) if shown else None
            return (read and read(obj)) or obj.__code__
        try:
            if t is types.MethodType:
                obj = obj.__func__
                continue
            if issubclass(t, functools.partial):
                obj = obj.func  # a subclass's own `func` may be a property
                continue
            code = getattr(obj, "__code__", None)
            if isinstance(code, types.CodeType):  # Cython's functions have one
                return code
            wrapped = getattr(obj, "__wrapped__", None)
        except Exception:  # a proxy whose attributes fail
            return None
        if wrapped is None or wrapped is obj:
            return None
        obj = wrapped
    return None


def describe(fn: Any) -> str:
    """`qualname (file:line)` for a function, method or partial; a repr otherwise."""
    code = code_of(fn, shown=True)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if code is None:
        return name if isinstance(name, str) else repr(fn)
    if not isinstance(name, str):
        name = code.co_qualname
    return f"{name} ({code.co_filename}:{code.co_firstlineno})"


def static_fix(names: tuple[str, ...], jit: bool = False) -> str:
    """The fix that keeps captures static, as code to paste.

    It reads `lift(f, static=('b2',))`. Under `lift.jit` (`jit`), it reads
    `lift.jit(lift.lift(f, static=('b2',)))`. Give the error `static=names`."""
    call = f"lift(f, static={names!r})"
    return f"`lift.jit(lift.{call})`" if jit else f"`{call}`"


def under_lift_jit(err: LiftError) -> LiftError:
    """`err` as `lift.jit` raises it.

    A fix keeping captures static takes the form that works there. An
    error without such a fix is returned as it is."""
    names = err.static_names
    if names is None:
        return err
    text = str(err).replace(static_fix(names), static_fix(names, jit=True))
    if text == str(err):
        return err
    better = type(err)(text, anchor=err.anchor)
    better.__traceback__ = err.__traceback__
    return better


def docs_anchor(anchor: str) -> str:
    """The last line of a message: the command that prints its entry of the
    Errors page, `python -m lift explain <anchor>` (and the page's address,
    once `DOCS_URL` has one).

    `anchor` is a heading id of `docs/errors.md`, which the package ships.
    The tests check that every anchor used in `lift/` has an entry there.
    Prefer `LiftError(message, anchor=...)`, which appends it.
    """
    line = f"\nDocs: python -m lift explain {anchor}"
    return line + f", or {DOCS_URL}errors/#{anchor}" if DOCS_URL else line


def missing_attribute(lifted: Any, name: str) -> LiftAttributeError:
    """The error for `lifted.name` when neither `Lifted` nor its function has it.

    The usual cause is a factory lifted instead of what it makes:
    `lift.lift(optax.adam).init`. The message is sure of it when the return
    annotation is a class that has `name`. It is written when read, so
    `hasattr` stays cheap.
    """
    err = LiftAttributeError(anchor="lifted-a-factory")
    err.name = name
    err.obj = lifted
    err._unwritten = (lifted, name)  # pyright: ignore[reportPrivateUsage]
    return err


def _missing_message(lifted: Any, name: str) -> str:
    cls = type(lifted).__name__
    call = "lift.lift" if cls == "Lifted" else cls
    fn = lifted.__wrapped__  # a `Lifted`'s function, method or partial
    own = getattr(fn, "__name__", None)
    fn_name = own if isinstance(own, str) else "f"  # a partial has none
    where = describe(fn)
    head = f"{cls!r} object has no attribute {name!r}"
    made = _made_by(fn, name)
    factory = f"{_importable_name(fn, fn_name)}({_required_args(fn)})"
    if made is not None:
        return (
            f"{head}: {call}({fn_name}) lifted the function {where}, and "
            f"{fn_name} is a factory: it returns a {made}, which has {name!r}.\n"
            f"Fix: call it first and lift what it returns: `{call}({factory})`."
        )
    return (
        f"{head}: a {cls} has the attributes of a function ({where}) and its "
        f"class's methods.\nFix: if {fn_name} is a factory (it "
        f"returns the object that has {name!r}), call it first and lift what it "
        f"returns: `{call}({factory})`."
    )


def _made_by(fn: Any, name: str) -> str | None:
    """The name of the class `fn` is annotated to return, if it has `name`."""
    try:
        returned = inspect.signature(fn, eval_str=True).return_annotation
    except Exception:
        return None
    if isinstance(returned, type) and hasattr(returned, name):
        return returned.__name__
    return None


def _importable_name(fn: Any, name: str) -> str:
    """A function's importable name, `optax.adam` for `optax._src.alias.adam`.

    A function its top-level package exports gets the package's name."""
    module = str(getattr(fn, "__module__", "") or "")
    top, dot, _ = module.partition(".")
    package = sys.modules.get(top)
    if package is not None and dot and getattr(package, name, None) is fn:
        return f"{top}.{name}"
    return name


def _required_args(fn: Any) -> str:
    """The names of `fn`'s required positional parameters, as a call's arguments."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except Exception:
        return "..."
    required = [
        p.name
        for p in parameters
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return ", ".join(required)


# `<function f at 0x7f...>`, `<Foo object at 0x7f...>`: the name says it all.
_ADDRESS: Final = re.compile(r" at 0x[0-9a-fA-F]+")


def static_str(value: Any, limit: int = 80) -> str:
    """A static value as people read it.

    It is its repr without object addresses, cut to `limit` characters. A
    negative nan reads `-nan`."""
    try:
        neg_nan = type(value) is float and value != value and copysign(1, value) < 0
        text = "-nan" if neg_nan else repr(value)
    except Exception:  # a repr of the user's that raises: the message still comes
        text = f"<{type(value).__qualname__} object>"
    text = _ADDRESS.sub("", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def array_text(shape: Iterable[Any], dtype: Any, weak: bool = False) -> str:
    """How every message names an array type: `float32[3]`, `key<fry>[]`.

    A weakly typed one (`weak`) is `~float32[]`. `jax.jit` keys it apart
    from a strong one."""
    return f"{'~' if weak else ''}{dtype}[{','.join(map(str, shape))}]"


def type_text(x: Any) -> str:
    """`x`'s type as messages name it.

    Arrays, tracers and abstract values read as `array_text` spells them.
    Anything else reads as its class's name."""
    try:
        aval = getattr(x, "aval", x)  # a tracer's or `jax.Array`'s; else `x` itself
        shape: Any = aval.shape
        dtype: Any = aval.dtype
        if type(shape) is tuple and dtype is not None:
            weak = getattr(aval, "weak_type", False) is True
            return array_text(cast("tuple[Any, ...]", shape), dtype, weak)
    except Exception:  # no shape or dtype, or an object whose attributes raise
        pass
    return type(x).__name__
