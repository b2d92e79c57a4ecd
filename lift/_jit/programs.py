"""The programs `lift.jit` shares: one `jax.jit` per code object and options.

Each jits a trampoline. It takes the function itself, as a `Lifted`, before
its own arguments. The `Lifted`'s treedef keys the program; its leaves are
parameters. Options that count positional parameters shift by one. Options
that name them resolve against the function's own signature.

The stages (`Traced`, `Lowered`, `Compiled`) wrap JAX's. They bind the leading
argument. So they take and describe the function's own arguments.
"""

from __future__ import annotations

import functools
import inspect
import re
import threading
import types
from collections.abc import Callable
from typing import Any, Final, cast

import jax

from .. import _compat
from .._base.caches import BoundedDict
from .._base.errors import LiftError, code_of, describe
from .options import (
    ARGNUMS,
    as_tuple,
    fn_name,
    positional,
    resolved,
    shifted,
    static_positions,
    translate,
)

# Typed loosely: options reach it as a dict, checked by `translate` and by JAX.
_jax_jit: Final = cast("Callable[..., Any]", jax.jit)  # pyright: ignore[reportUnknownMemberType]


# -- the shared programs -------------------------------------------------------------

# One line, so that a traceback through a trampoline shows the line where the
# user's function is defined (the trampoline's code takes that file and line).
_call_lifted = lambda __lifted__, /, *args, **kwargs: __lifted__(*args, **kwargs)  # pyright: ignore[reportUnknownLambdaType, reportUnknownVariableType]


class _Missing:
    """No value given; in a trampoline's signature, a parameter's default.

    The real default belongs to one closure; the trampoline outlives it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "..."


MISSING: Final = _Missing()


class Program:
    """A jitted trampoline for one code object and one set of options.

    `jitted` is `None` when `in_shardings` is a single sharding. `jax.jit`
    gives it to every dynamic positional argument. The `Lifted` in front must
    not get it. So there is one trampoline per number of positional arguments.
    """

    vetted: Final = True  # lift's own static data: see `lift._rule.hidden.aux_tracer`

    __slots__ = (
        "_by_nargs",
        "_static_positions",
        "jitted",
        "kwargs",
        "min_nargs",
        "options",
        "static_names",
        "trampoline",
    )

    def __init__(self, fn: Any, options: dict[str, Any]) -> None:
        signature = _signature(fn)
        self.kwargs = kwargs = translate(fn, signature, options)
        self.trampoline = _trampoline(fn, signature)
        self.static_names = frozenset(resolved(signature, options, "static"))
        # The options as given, relative to the function's own parameters: for a
        # program of the function alone (`bake`).
        self.options = options
        # The trampoline's positions that are static (numbered, or named
        # positional parameters), negative ones counted from the end of a call.
        self._static_positions = static_positions(signature, kwargs)
        # Negative argument numbers count from the end of a call's positional
        # arguments. With fewer of them, `jax.jit` raises for a static one and
        # ignores a donated one, but the trampoline would take the `Lifted` in
        # front for it: such calls go through `for_nargs`.
        negative = [n for o in ARGNUMS for n in as_tuple(kwargs.get(o), int) if n < 0]
        self.min_nargs = -min(negative, default=0)
        self._by_nargs: dict[int, Any] = {}
        in_shardings = kwargs.get("in_shardings", MISSING)
        self.jitted: Any = None
        if in_shardings is MISSING or isinstance(in_shardings, (tuple, list)):
            self.jitted = _jax_jit(self.trampoline, **self._kwargs_for(None))

    def __repr__(self) -> str:
        # What `lift.diff` shows of two `lift.jit` functions' programs.
        return f"jax.jit options {self.options!r}"

    def _kwargs_for(self, nargs: int | None) -> dict[str, Any]:
        """The trampoline's options, for calls with `nargs` positional arguments
        (`None`: any number)."""
        kwargs = dict(self.kwargs)
        in_shardings = kwargs.get("in_shardings", MISSING)
        if isinstance(in_shardings, (tuple, list)):
            kwargs["in_shardings"] = (None, *in_shardings)  # pyright: ignore[reportUnknownArgumentType]
        elif in_shardings is not MISSING and nargs is not None:
            # `jax.jit` drops static arguments before it matches `in_shardings`
            # with the rest (jax 0.10.2): count the dynamic ones only.
            static = set(_from_front(self._static_positions, nargs))
            kwargs["in_shardings"] = (None, *[in_shardings] * (nargs - len(static)))
        donated = kwargs.get("donate_argnums")
        if donated is not None and nargs is not None:
            kwargs["donate_argnums"] = _from_front(donated, nargs)
        return kwargs

    def for_nargs(self, nargs: int) -> Any:
        """The jitted trampoline for calls with `nargs` positional arguments.

        One serves any number. A single sharding for all arguments needs one
        per number. So do argument numbers counted from the end."""
        jitted: Any = self.jitted
        if jitted is not None and nargs >= self.min_nargs:
            return jitted
        jitted = self._by_nargs.get(nargs)
        if jitted is None:
            n = min(as_tuple(self.kwargs.get("static_argnums"), int), default=0)
            if nargs < -n:
                # The error `jax.jit` raises for an argument number out of range.
                raise ValueError(
                    "Positional argument indices, e.g. for `static_argnums`, must "
                    "have value greater than or equal to -len(args) and less than "
                    f"len(args), but got value {n} for len(args) == {nargs}."
                )
            jitted = _jax_jit(self.trampoline, **self._kwargs_for(nargs))
            # One trampoline per number, whichever thread made it first
            # (`setdefault` is atomic).
            jitted = self._by_nargs.setdefault(nargs, jitted)
        return jitted

    def bake(self, lifted: Any, *bound: Any) -> Any:
        """`jax.jit` of the function alone, its captures constants.

        `jax.export` exports a function of its arguments only. `bound` are its
        first arguments, such as a method's instance."""
        fn = functools.partial(self.trampoline, lifted, *bound)
        return _jax_jit(fn, **shifted(self.options, len(bound)))

    def explain(
        self, fn: Any, err: BaseException, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> LiftError | None:
        """Say which parameter `jax.jit` rejected, and how to mark it static."""
        rejected = _compat.bad_argument(err)
        if rejected is None and not _compat.is_unhashable_static(err):
            return None
        names = positional(_signature(fn))
        values = {
            names[i] if i < len(names) else f"args[{i}]": a for i, a in enumerate(args)
        } | kwargs
        if rejected is not None:
            kind, path = rejected
            # Never the lifted function, passed first: its leaves are arrays.
            name = re.split(r"[\[.]", path, maxsplit=1)[0]
            fix = (
                f"mark it static, `lift.jit({fn_name(fn)}, static_argnames=({name!r},))`, "
                "or pass an array."
            )
            # An equinox module is unhashable: it cannot be static either.
            if _from_equinox(values.get(name)):
                fix = _equinox_fix(fn)
            elif name == "self":
                fix = (
                    "make the class a pytree (an equinox.Module, or a dataclass under "
                    "`jax.tree_util.register_dataclass`), or " + fix
                )
            return LiftError(
                f"{describe(fn)} was called with a {kind} for its parameter "
                f"{name!r} (at {path}), which is not an array: lift.jit passes "
                f"arguments to the compiled program as jax.jit does.\nFix: {fix}",
                anchor="jit-argument-not-an-array",
            )
        bad = [
            n for n, v in values.items() if n in self.static_names and not _hashable(v)
        ]
        what = "for one of its static parameters"
        if bad:
            what = f"for the parameter {bad[0]!r}, which is static"
        fix = "pass a hashable value (a tuple instead of a list), or do not mark it static."
        if any(_from_equinox(values.get(name)) for name in bad):
            fix = _equinox_fix(fn)
        return LiftError(
            f"{describe(fn)} was called with an unhashable value {what}: a static "
            f"argument is part of the compiled program's key.\nFix: {fix}",
            anchor="jit-unhashable-static",
        )


def _from_front(nums: tuple[int, ...], nargs: int) -> tuple[int, ...]:
    """The trampoline's positions `nums`, numbered from the front for `nargs`.

    Those out of range are left out, as JAX ignores them."""
    front = (n if n >= 0 else n + nargs + 1 for n in nums)
    return tuple(n for n in front if 1 <= n <= nargs)


# The programs functions of one code share, by key (at most 4096: emptied when full).
_programs: BoundedDict[Any, Program] = BoundedDict(4096)
_programs_lock = threading.Lock()


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)  # pyright: ignore[reportUnknownVariableType]
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    return value


def _shape_key(fn: Any) -> Any:
    """What the signature of `fn` depends on, cheaply for a plain function.

    A function with `__wrapped__` is read by `inspect.signature`, which
    follows it. Two wrappers made by one decorator share code but not
    parameters.
    """
    if type(fn) is types.FunctionType and not (
        "__wrapped__" in fn.__dict__ or "__signature__" in fn.__dict__
    ):
        defaults, kwdefaults = fn.__defaults__ or (), fn.__kwdefaults__ or {}
        return fn.__code__, len(defaults), tuple(kwdefaults)
    parameters = _signature(fn).parameters.values()
    shape = tuple((p.name, p.kind, p.default is p.empty) for p in parameters)
    return type(fn), code_of(fn), shape


def program(fn: Any, options: dict[str, Any]) -> Program:
    """The shared program for `fn`'s code, made (and checked) on first sight.

    It is keyed on the code and the options, when they are hashable."""
    frozen = _freeze(options)
    key = (_shape_key(fn), frozen) if _hashable(frozen) else None
    if key is not None and (program := _programs.get(key)) is not None:
        return program
    program = Program(fn, options)
    if key is not None:
        with _programs_lock:
            program = _programs.add(key, program)
    return program


def _signature(fn: Any) -> inspect.Signature:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return _ANY_SIGNATURE


# What a callable without a signature is taken to take: anything.
_ANY_SIGNATURE: Final = inspect.signature(lambda *args, **kwargs: None)


def _trampoline(fn: Any, signature: inspect.Signature) -> Callable[..., Any]:
    """`lambda lifted, *args, **kwargs: lifted(*args, **kwargs)` dressed as `fn`.

    JAX names the program and its arguments from the function it jits. Its
    errors say "while tracing step at file:line". So the trampoline takes
    `fn`'s name, file and line. Its signature has `fn`'s parameters after the
    lifted function. `static_argnames` and messages then work as for `fn`.
    """
    name = fn_name(fn)
    qualname = getattr(fn, "__qualname__", name)
    qualname = qualname if isinstance(qualname, str) else name
    code: types.CodeType = _call_lifted.__code__  # pyright: ignore[reportUnknownMemberType]
    root = code_of(fn)
    if root is not None:
        code = code.replace(
            co_name=name,
            co_qualname=qualname,
            co_filename=root.co_filename,
            co_firstlineno=root.co_firstlineno,
        )
    trampoline = types.FunctionType(code, _call_lifted.__globals__, name)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    trampoline.__qualname__ = qualname
    first = "__lifted__"
    while first in signature.parameters:
        first += "_"
    params = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
    params = [p if p.default is p.empty else p.replace(default=MISSING) for p in params]
    lifted = inspect.Parameter(first, inspect.Parameter.POSITIONAL_ONLY)
    trampoline.__signature__ = inspect.Signature([lifted, *params])  # type: ignore[attr-defined]
    return trampoline


def _from_equinox(value: Any) -> bool:
    """Whether `value` is an `equinox.Module`, without importing equinox."""
    return any(str(c.__module__).startswith("equinox.") for c in type(value).__mro__)


def _equinox_fix(fn: Any) -> str:
    """The fix for an equinox module passed to `lift.jit`.

    A module is neither an array nor hashable."""
    name = fn_name(fn)
    return (
        "compile with equinox, which passes a module's arrays and keeps the rest "
        f"static: `eqx.filter_jit(lift.lift({name}))` in place of `lift.jit({name})` "
        f"(`{name}` undecorated)."
    )


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
