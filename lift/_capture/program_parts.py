"""What a traced program runs or holds that its printed text does not show.

The text names custom derivative rules and callbacks only. It does not show
a nested `jit`'s constants or shardings. `ProgramParts` collects them from
every equation, sub-programs included. They join closure conversion's static
key. Rules compare as `lift` compares closures. Everything else compares by
value or identity. A rule that captures a tracer is refused. JAX traces a rule
later, after the tracer's trace has ended."""

from __future__ import annotations

import functools
from typing import Any

import jax.extend.core

from .. import _compat
from .._base.errors import LiftError, describe
from .._rule.static import static_key
from .._skeleton.paths import leaf_paths
from .capture import capture

_CALLBACK_FIX = (
    "pass it to the callback as an argument: `jax.pure_callback(cb, shape, x, value)`"
)
_VJP_FIX = (
    "make it an argument of the custom_vjp function and return it as a "
    "residual from the forward rule for the backward rule to use"
)
_Jaxpr: type[Any] = jax.extend.core.Jaxpr  # pyright: ignore


# What each kind of rule is called in messages, and how to fix a capture in it.
_RULES: dict[tuple[str, str], tuple[str, str]] = {
    ("custom_jvp_call", "jvp_jaxpr_fun"): (
        "custom_jvp rule",
        "make it an argument of the custom_jvp function (`f(x, scale)` rather "
        "than a `scale` the rule closes over)",
    ),
    ("custom_vjp_call", "fwd_jaxpr_thunk"): ("custom_vjp forward rule", _VJP_FIX),
    ("custom_vjp_call", "bwd"): ("custom_vjp backward rule", _VJP_FIX),
    ("custom_lin", "bwd"): ("custom_vjp backward rule", _VJP_FIX),
}


def _rule_name(primitive: str, param: str) -> tuple[str, str]:
    if param == "callback":
        return f"{primitive} callback", _CALLBACK_FIX
    other = (f"`{param}` of `{primitive}`", "pass it as an argument instead")
    return _RULES.get((primitive, param), other)


def _held(*parts: Any) -> None:
    """The function whose partial holds a program's rules, for `capture`.

    It is never called."""


class ProgramParts:
    """What a traced program runs or holds that its printed text does not show.

    `key` compares the rules' code and captures as `lift` compares closures.
    It compares their leaves, nested constants and other parameters by the
    static rule (`_value`). Numbers compare by value. Arrays and what cannot
    be hashed compare by identity.
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
                        if t is tuple or t is list:
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
        """A parameter, constant or leaf as the static rule compares it.

        `static_key` compares numbers by type and value, floats by bits. What
        it cannot compare (an array) compares by identity. That one is kept
        alive (`alive`), so its id stays meaningful."""
        try:
            return static_key(v)
        except Exception:  # unhashable: by identity
            self.alive.append(v)
            return ("id", id(v))

    def _const(self, c: Any) -> Any:
        if _compat.is_tracer(c):  # jax 0.10.2 makes tracers inputs, never constants
            raise LiftError(
                f"{self.where}: a nested program holds the tracer {c!r:.80} as a "
                "constant.\nFix: pass it as an argument of the nested function.",
                anchor="convert-tracer-constant",
            )
        return self._value(c)

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
        self.key.append(tuple(map(self._value, leaves)))

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
    if skeleton.live is not None:  # hidden in an object: kept only while its trace runs
        return f"that lift cannot make a leaf ({skeleton.live})"
    for path, leaf in zip(leaf_paths(skeleton), leaves, strict=True):
        if _compat.is_tracer(leaf):
            where = str(path).lstrip(".") or "value"
            aval, transform = _compat.tracer_aval(leaf), _compat.transform_name(leaf)
            return f"in `{where}` ({aval} from {transform})"
    return None


_ClosedJaxpr: type[Any] = jax.extend.core.ClosedJaxpr  # pyright: ignore
