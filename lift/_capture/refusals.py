"""What the walk refuses to capture, and the messages that say so: each names
the function, the variable and the fix, as `static=(...)` where keeping the
capture static would do."""

from __future__ import annotations

from typing import Any

from .._base.errors import LiftError, describe, static_fix, type_text
from .._holders.labels import Label, variable_str
from .._holders.trees import MAX_CONTAINER_DEPTH


def _name(label: Label) -> str:
    name = label.variable
    return name if type(name) is str and name else "name"


def flattening_refused(holder: Any, label: Label, err: Exception) -> LiftError:
    """A capture JAX's pytree flattening refuses (dict keys it cannot sort, a
    node whose flatten fails)."""
    name = _name(label)
    return LiftError(
        f"{describe(holder)} captures {variable_str(label)}, which "
        f"JAX's pytree flattening refuses ({err}).\nFix: use dict "
        f"keys of one type, or keep it static with {static_fix((name,))}.",
        anchor="capture-flattening-refused",
        static=(name,),
    )


def container_cycle(holder: Any, label: Label) -> LiftError:
    """A capture that contains itself, or nests too deep to flatten."""
    name = _name(label)
    return LiftError(
        f"{describe(holder)} captures {variable_str(label)}, a "
        "container that contains itself or nests more than "
        f"{MAX_CONTAINER_DEPTH} levels deep, which JAX's pytree "
        "flattening cannot take.\nFix: pass it as an argument, or "
        f"keep it static with {static_fix((name,))}.",
        anchor="container-cycle",
        static=(name,),
    )


def not_traceable(holder: Any, label: Label, t: type[Any]) -> LiftError:
    """A leaf the `dynamic=` predicate chose that JAX cannot trace."""
    name = _name(label)
    return LiftError(
        f"{describe(holder)} captures {variable_str(label)}, a "
        f"{t.__name__}, which your `dynamic=` predicate made a leaf, but "
        "JAX cannot trace it.\nFix: make the predicate accept only "
        f"arrays and numbers, or keep it static with {static_fix((name,))}.",
        anchor="dynamic-predicate",
        static=(name,),
    )


def static_tracer(holder: Any, label: Label, leaf: Any) -> LiftError:
    """A capture kept static (`static=`, or the `dynamic=` predicate's answer)
    that holds a tracer."""
    return LiftError(
        f"{describe(holder)} captures {variable_str(label)} as static, "
        f"but it holds a tracer ({type_text(leaf)}). A static capture becomes "
        "part of the compiled program's key and would leak the tracer.\n"
        "Fix: let it be dynamic (remove it from `static=`, or make your "
        "`dynamic=` predicate accept tracers).",
        anchor="static-capture-holds-a-tracer",
    )
