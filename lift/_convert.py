"""Closure conversion: trace a function and lift every constant it closed over.

`lift` sees captures that are pytree leaves. A tracer hidden in an object that is
not a pytree, behind an attribute or in a module global is invisible to it, but
not to a trace: tracing `fn` once turns every closed-over tracer and array, of
every dtype, into a constant of the traced program. `convert` hoists all of them
out as leaves and keeps the program itself as static data compared by its
structure, so converting the same code on arguments of the same shapes twice
gives equal treedefs, and nothing keeps `fn` or a tracer alive afterwards.
Unlike `jax.closure_convert`, integer, boolean and PRNG-key tracers are hoisted
too, and there is no cache keyed on the function object.

The printed program is not all of it: custom derivative rules and callbacks are
shown by name, and parameters such as a nested `jit`'s constants or shardings
not at all. `_Hidden` collects those from every equation, sub-programs included:
the rules' code and captures compared as `lift` compares closures (floats by
value, arrays by identity), everything else by value or identity. A rule that
captures a tracer is refused: JAX traces it only when it differentiates or calls
back, after the trace owning the tracer has ended.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any, Final

import jax
import jax.core
import jax.extend.core
import jax.numpy as jnp
import numpy as np

from . import _compat
from ._capture import capture
from ._errors import LiftError, describe
from ._paths import leaf_paths

# JAX's public functions used here, typed once for the type checker.
_flatten: Callable[[Any], tuple[list[Any], Any]] = jax.tree_util.tree_flatten  # pyright: ignore
_unflatten: Callable[[Any, Any], Any] = jax.tree_util.tree_unflatten  # pyright: ignore
_make_jaxpr: Callable[..., Callable[..., Any]] = jax.make_jaxpr  # pyright: ignore
_eval_jaxpr: Callable[..., list[Any]] = jax.core.eval_jaxpr  # pyright: ignore
_asarray: Callable[[Any], Any] = jnp.asarray  # pyright: ignore
_Jaxpr: type[Any] = jax.extend.core.Jaxpr  # pyright: ignore
_ClosedJaxpr: type[Any] = jax.extend.core.ClosedJaxpr  # pyright: ignore


__all__ = ["convert"]


def _short(shape: tuple[int, ...], dtype: Any) -> str:
    return f"{jnp.dtype(dtype).name}[{','.join(map(str, shape))}]"


def _signature(leaves: list[Any]) -> tuple[tuple[tuple[int, ...], Any], ...]:
    out: list[tuple[tuple[int, ...], Any]] = []
    for leaf in leaves:
        aval = jax.typeof(leaf)
        out.append((tuple(aval.shape), aval.dtype))  # pyright: ignore
    return tuple(out)


# What each kind of rule is called in messages, and how to fix a capture in it.
_RULES: dict[tuple[str, str], tuple[str, str]] = {
    ("custom_jvp_call", "jvp_jaxpr_fun"): (
        "custom_jvp rule",
        "make it an argument of the custom_jvp function (`f(x, scale)` rather "
        "than a `scale` the rule closes over)",
    ),
    ("custom_vjp_call", "fwd_jaxpr_thunk"): (
        "custom_vjp forward rule",
        "make it an argument of the custom_vjp function and return it as a "
        "residual from the forward rule for the backward rule to use",
    ),
    ("custom_vjp_call", "bwd"): (
        "custom_vjp backward rule",
        "make it an argument of the custom_vjp function and return it as a "
        "residual from the forward rule for the backward rule to use",
    ),
    ("custom_lin", "bwd"): (
        "custom_vjp backward rule",
        "make it an argument of the custom_vjp function and return it as a "
        "residual from the forward rule for the backward rule to use",
    ),
}
_CALLBACK_FIX = (
    "pass it to the callback as an argument: `jax.pure_callback(cb, shape, x, value)`"
)


def _rule_name(primitive: str, param: str) -> tuple[str, str]:
    found = _RULES.get((primitive, param))
    if found is not None:
        return found
    if param == "callback":
        return f"{primitive} callback", _CALLBACK_FIX
    return f"`{param}` of `{primitive}`", "pass it as an argument instead"


def _held(*parts: Any) -> None:
    """The function whose partial holds every rule of a program, for `capture`."""
    del parts


class _Hidden:
    """What a traced program runs or holds that its printed text does not show.

    `key` compares the rules' code and captures as `lift` compares closures,
    with captured floats by value and arrays by identity (`alive` keeps those
    objects alive so their ids stay meaningful), and every other parameter of
    every equation by value (by identity when unhashable).
    """

    __slots__ = ("alive", "key", "parts", "sites", "where")

    def __init__(self, jaxpr: Any, where: str) -> None:
        self.where = where
        self.key: list[Any] = []
        self.alive: list[Any] = []
        self.parts: list[tuple[str, Any]] = []
        # (rule name, fix, indices into `parts`) per equation parameter running code.
        self.sites: list[tuple[str, str, tuple[int, ...]]] = []
        part_index: dict[int, int] = {}
        seen: dict[int, int] = {}
        stack: list[Any] = [jaxpr]
        while stack:
            j = stack.pop()
            if id(j) in seen:
                self.key.append(("again", seen[id(j)]))
                continue
            seen[id(j)] = len(seen)
            for eqn in j.eqns:
                primitive: str = eqn.primitive.name
                for name, value in eqn.params.items():
                    self.key.append(name)
                    values: list[Any] = [value]
                    while values:
                        v = values.pop()
                        t: type[Any] = type(v)  # pyright: ignore[reportUnknownVariableType]
                        if t in (int, bool, str, type(None)):
                            self.key.append(v)
                        elif t is tuple or t is list:
                            self.key.append((t, len(v)))
                            values.extend(v)
                        elif isinstance(v, _ClosedJaxpr):
                            stack.append(v.jaxpr)
                            self.key.append(("consts", *map(self._const, v.consts)))
                        elif isinstance(v, _Jaxpr):
                            stack.append(v)
                        elif _compat.runs_code(v):
                            indices: list[int] = []
                            for part in _compat.rule_parts(v):
                                index = part_index.setdefault(
                                    id(part[1]), len(self.parts)
                                )
                                if index == len(self.parts):
                                    self.parts.append(part)
                                indices.append(index)
                            rule, fix = _rule_name(primitive, name)
                            self.sites.append((rule, fix, tuple(indices)))
                            self.key.append(("rule", tuple(indices)))
                        else:
                            self.key.append(self._value(v))
        self._capture_rules()

    def _value(self, v: Any) -> Any:
        if type(v) is float:
            return (float, v.hex())
        try:
            hash(v)
        except Exception:  # an unhashable parameter: by identity
            self.alive.append(v)
            return ("id", id(v))
        return (type(v), v)

    def _const(self, c: Any) -> Any:
        if _compat.is_tracer(c):  # jax 0.10.2 makes tracers inputs, never constants
            raise LiftError(
                f"{self.where}: a nested program holds the tracer {c!r:.80} as a "
                "constant.\nFix: pass it as an argument of the nested function.",
                anchor="convert-tracer-constant",
            )
        return self._leaf(c)

    def _leaf(self, x: Any) -> Any:
        t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
        if t is float:
            return (float, x.hex())  # -0.0 and nan as themselves
        if t is complex:
            return (complex, x.real.hex(), x.imag.hex())
        if issubclass(t, np.generic):
            return (t, x.tobytes())
        if t in (int, bool):
            return (t, x)
        self.alive.append(x)
        return ("id", id(x))

    def _capture_rules(self) -> None:
        if not self.parts:
            return
        try:
            skeleton, leaves = capture(
                functools.partial(_held, *(p for _, p in self.parts))
            )
        except LiftError:
            self._refuse()
            raise
        if skeleton.live is not None or any(map(_compat.is_tracer, leaves)):
            self._refuse()
        self.key.append(skeleton)
        self.key.append(tuple(map(self._leaf, leaves)))

    def _refuse(self) -> None:
        """Raise a `LiftError` naming the first rule that holds a tracer."""
        for rule, fix, indices in self.sites:
            code = next(
                (self.parts[i][1] for i in indices if self.parts[i][0] == "code"), None
            )
            named = f"{rule} {describe(code)}" if code is not None else rule
            for i in indices:
                origin, part = self.parts[i]
                found = _tracer_in(part)
                if found is None:
                    continue
                if origin == "static":
                    found = "in a static argument JAX binds to it (`nondiff_argnums`)"
                    fix = (
                        "pass arrays as ordinary arguments of the function, not as "
                        "static ones"
                    )
                raise LiftError(
                    f"lift.closure_convert({self.where}): the {named} captures a "
                    f"tracer {found}. JAX traces a rule or callback only when it "
                    "differentiates or calls back, after the trace owning the tracer "
                    "has ended, so the converted function cannot keep it.\nFix: "
                    f"{fix}, so that the trace sees the value and hoists it.",
                    anchor="convert-rule-captures-a-tracer",
                )


def _tracer_in(part: Any) -> str | None:
    """Where a tracer sits in `part`, said for a message, if anywhere."""
    try:
        skeleton, leaves = capture(
            part if callable(part) else functools.partial(_held, part)
        )
    except LiftError as err:
        return f"that lift cannot make a leaf ({str(err).splitlines()[0]})"
    live = skeleton.live
    if live is not None:  # hidden in an object: kept only while its trace runs
        return f"that lift cannot make a leaf ({live})"
    for path, leaf in zip(leaf_paths(skeleton), leaves, strict=True):
        if _compat.is_tracer(leaf):
            where = str(path).lstrip(".") or "value"
            aval, transform = _compat.tracer_aval(leaf), _compat.transform_name(leaf)
            return f"in `{where}` ({aval} from {transform})"
    return None


class Program:
    """A traced program without its constants: the static half of a conversion.

    Its rules and callbacks were vetted when it was made (see `_Hidden`); the
    jaxpr itself keeps JAX's own references to the finished trace, which are no
    captures of the user's, so the scan for tracers in static data passes it by
    (`vetted`).

    Compared by the program's printed text, what the text does not show (see
    `_Hidden`), its input and output trees and the types of its inputs and
    constants; so is its hash.
    """

    vetted: Final = True  # see `lift._closure.aux_tracer`

    __slots__ = (
        "_alive",
        "_hash",
        "_key",
        "in_sig",
        "in_tree",
        "jaxpr",
        "name",
        "out_tree",
        "where",
    )

    def __init__(
        self,
        jaxpr: Any,
        in_tree: Any,
        out_tree: Any,
        in_sig: tuple[tuple[tuple[int, ...], Any], ...],
        const_sig: tuple[tuple[tuple[int, ...], Any], ...],
        name: str,
        where: str,
    ) -> None:
        hidden = _Hidden(jaxpr, where)
        self.jaxpr = jaxpr
        self.in_tree = in_tree
        self.out_tree = out_tree
        self.in_sig = in_sig
        self.name = name
        self.where = where
        self._key = (str(jaxpr), in_tree, out_tree, in_sig, const_sig, *hidden.key)
        self._alive = tuple(hidden.alive)
        self._hash = hash(self._key)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Program)
            and self._hash == other._hash
            and self._key == other._key
        )

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        ins = ", ".join(_short(s, d) for s, d in self.in_sig)
        return f"Program({self.name}({ins}))"

    def run(self, consts: tuple[Any, ...], args: tuple[Any, ...], kwargs: Any) -> Any:
        """Evaluate the program on new arguments of the traced shapes."""
        __tracebackhide__ = True
        leaves, tree = _flatten((args, kwargs))
        if tree != self.in_tree:
            raise LiftError(
                f"{self.where} was closure-converted for arguments structured as "
                f"{self.in_tree}, and got {tree}.\nFix: convert it again with the new "
                f"arguments: `lift.closure_convert({self.name}, *args, **kwargs)`.",
                anchor="convert-other-arguments",
            )
        given = _signature(leaves)
        if given != self.in_sig:
            expected = ", ".join(_short(s, d) for s, d in self.in_sig)
            got = ", ".join(_short(s, d) for s, d in given)
            raise LiftError(
                f"{self.where} was closure-converted for arguments ({expected}) and "
                f"was called with ({got}).\nFix: call it with arguments of those shapes "
                f"and dtypes, or convert it again for the new ones: "
                f"`lift.closure_convert({self.name}, *args, **kwargs)`.",
                anchor="convert-other-arguments",
            )
        out = _eval_jaxpr(self.jaxpr, list(consts), *leaves)
        return _unflatten(self.out_tree, out)


# A program is static data: a pytree node without children, so that `lift`
# compares it by its key as part of the treedef, and does not scan the traced
# program object by object for tracers (it holds none: rules that capture one
# are refused, constants are hoisted).
jax.tree_util.register_pytree_node(  # pyright: ignore[reportUnknownMemberType]
    Program, lambda p: ((), p), lambda p, _: p
)


def _converted(program: Program, consts: tuple[Any, ...]) -> types.FunctionType:
    def converted(*args: Any, **kwargs: Any) -> Any:
        return program.run(consts, args, kwargs)

    return converted  # pyright: ignore[reportReturnType]


def _as_leaf(const: Any) -> Any:
    # Constants that are neither tracers nor jax arrays (NumPy arrays wrapped by
    # the trace) become jax arrays, so that lift makes them leaves.
    if isinstance(const, jax.Array):
        return const
    return _asarray(np.asarray(const))


def convert(
    fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> types.FunctionType:
    """Trace `fn` on `args`/`kwargs` and return a function running the program.

    **Arguments:**

    - `fn`: the function to convert.
    - `args`, `kwargs`: example arguments; their shapes and dtypes are the ones
      the result accepts.

    **Returns:**

    A function that runs the traced program on the constants it closed over:
    lifted (`Lifted.closure_convert`), its leaves are every tracer and array
    `fn` closed over (through cells, globals, attributes, anything), and its
    static part is the program.
    """
    if not callable(fn):
        raise LiftError(
            f"lift.closure_convert expects a function, and got {type(fn).__qualname__} "
            f"{fn!r:.60}.\nFix: pass the function first: "
            "`lift.closure_convert(f, *example_args)`.",
            anchor="convert-not-a-function",
        )
    leaves, in_tree = _flatten((args, kwargs))
    out_trees: list[Any] = []

    def flat(*xs: Any) -> list[Any]:
        a, k = _unflatten(in_tree, xs)
        out, tree = _flatten(fn(*a, **k))
        out_trees.append(tree)
        return out

    closed = _make_jaxpr(flat)(*leaves)
    consts = tuple(_as_leaf(c) for c in closed.consts)
    name = getattr(fn, "__name__", None) or "fn"
    program = Program(
        _compat.bare_jaxpr(closed),
        in_tree,
        out_trees[-1],
        _signature(leaves),
        _signature(list(consts)),
        name,
        describe(fn),
    )
    converted = _converted(program, consts)
    for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
        value = getattr(fn, attr, None)
        if isinstance(value, str):
            setattr(converted, attr, value)
    return converted
