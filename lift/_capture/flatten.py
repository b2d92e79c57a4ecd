"""Flattening a captured value, and the refusals it meets.

Each message names the function, the variable and the fix. The fix is
`static=(...)` where keeping the capture static would do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._base.errors import LiftError, describe, static_fix, type_text
from .._compat import X64
from .._holders import trees as jtu
from .._holders.labels import Label, variable_str
from .._holders.trees import MAX_CONTAINER_DEPTH, flatten_checked, slot_path
from .._rule.hidden import plain_treedef
from .._rule.static import unsortable_registry
from .factories import flatten_factored, has_function_factory


def flatten_capture(
    value: Any,
    is_leaf: Callable[[Any], bool],
    factored_leaf: Callable[[], Callable[[Any], bool]],
    forced: bool,
    holder: Any,
    label: Label,
) -> tuple[list[Any], jtu.TreeDef] | None:
    """`value`'s leaves and treedef, as the walk flattens a capture.

    A defaultdict with a function factory flattens with `factored_leaf()`.
    Its factory is a node (`lift._capture.factories`). `None` means the value
    stays whole and static. That is for a value JAX cannot flatten, or one
    that contains itself. It stays so under `static=` (`forced`), or as a
    registry JAX cannot sort. Any other such value is refused."""
    try:
        flat = flatten_checked(value, is_leaf)
    except (TypeError, ValueError) as err:
        if forced or unsortable_registry(value):
            return None
        raise refused(
            holder,
            label,
            f", which JAX's pytree flattening refuses ({err})",
            "use dict keys that sort (strings, or numbers of one type; an `Enum`'s "
            "members do not), a `collections.OrderedDict` (flattened in its own "
            "order, unsorted)",
            "capture-flattening-refused",
        ) from err
    if (
        flat is not None
        and not forced
        and not plain_treedef(flat[1])
        and has_function_factory(flat[1])
    ):
        flat = flatten_factored(value, factored_leaf())
    if flat is None:
        if forced:  # kept whole, by identity, as the fix says
            return None
        raise refused(
            holder,
            label,
            ", a container that contains itself or nests more than "
            f"{MAX_CONTAINER_DEPTH} levels deep, which JAX's pytree flattening "
            "cannot take",
            "pass it as an argument",
            "container-cycle",
        )
    return flat


def refused(holder: Any, label: Label, what: str, fix: str, anchor: str) -> LiftError:
    """The error for a capture lift cannot take, whose other fix is `static=`.

    `what` says what the capture is; `fix` says the first fix."""
    name = label.variable if type(label.variable) is str and label.variable else "name"
    return LiftError(
        f"{describe(holder)} captures {variable_str(label)}{what}.\nFix: {fix}, "
        f"or keep it static with {static_fix((name,))}.",
        anchor=anchor,
        static=(name,),
    )


def not_traceable(
    holder: Any, label: Label, t: type[Any], at: tuple[Any, int]
) -> LiftError:
    """The error for a leaf `dynamic=` chose that JAX cannot trace.

    `at` is the captured value's treedef and the leaf's position in it."""
    return refused(
        holder,
        label,
        f", a {t.__name__}{_within(label, at)}, which your `dynamic=` predicate "
        "made a leaf, but JAX cannot trace it",
        "make the predicate accept only arrays and numbers",
        "dynamic-predicate",
    )


def int_leaf(holder: Any, label: Label, value: int) -> bool:
    """`True`: an int `dynamic=` picks is a leaf; a `LiftError` if it overflows one.

    The leaf is an int32 array, or int64 with `jax_enable_x64`."""
    bits = 64 if X64.value else 32
    if -(1 << bits - 1) <= value < 1 << bits - 1:
        return True
    fix = "" if bits == 64 else "enable 64-bit values (`jax_enable_x64`), or "
    raise LiftError(
        f"{describe(holder)} captures {variable_str(label)} = {value}, which "
        f"`dynamic=` makes a leaf: an int leaf is an int{bits} array, and "
        f"{value} does not fit in one.\nFix: {fix}keep it static (leave it "
        "out of `dynamic=`).",
        anchor="int-leaf-overflows",
    )


def static_tracer(
    holder: Any, label: Label, leaf: Any, at: tuple[Any, int]
) -> LiftError:
    """The error for a capture kept static that holds a tracer.

    `static=` or the `dynamic=` predicate kept it. `at` is as for
    `not_traceable`."""
    return LiftError(
        f"{describe(holder)} captures {variable_str(label)} as static, "
        f"but it holds a tracer{_within(label, at)} ({type_text(leaf)}). A "
        "static capture becomes "
        "part of the compiled program's key and would leak the tracer.\n"
        "Fix: let it be dynamic (remove it from `static=`, or make your "
        "`dynamic=` predicate accept tracers); if a `lift.jit` function calling "
        f"this one made it a tracer, give the caller the same `static=` too "
        f"(`@lift.jit(static=({label.variable!r},))`).",
        anchor="static-capture-holds-a-tracer",
    )


def _within(label: Label, at: tuple[Any, int]) -> str:
    """Where in the captured value a leaf is (` at v[0]['w']`), or `""`."""
    path = slot_path(*at)
    return f" at {label.variable or label.text}{path}" if path else ""


def unreadable_holder(obj: Any, where: str, err: Exception) -> LiftError:
    """The error for a partial or method whose parts cannot be read.

    Its own code raised. `where` is where the walk met it."""
    return LiftError(
        f"{where}: a {type(obj).__qualname__} {obj!r:.60}, whose function, "
        f"arguments or keywords lift cannot read: reading them raised "
        f"{type(err).__name__}: {err}.\nFix: make its `func`, `args` and "
        "`keywords` readable, or capture a plain function instead.",
        anchor="unreadable-holder",
    )
