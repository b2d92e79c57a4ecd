"""How lift describes a `Lifted` to people: its repr, and the errors it raises
about a function's captures."""

# pyright: reportPrivateUsage=false
from __future__ import annotations

import re
import types
from typing import TYPE_CHECKING, Any, Final, cast

import jax
import jax.numpy as jnp

from ._compat import Tracer
from ._errors import LiftError, describe, docs_anchor
from ._paths import leaf_paths
from ._skeleton import (
    CellNode,
    FunctionNode,
    HolderNode,
    MethodNode,
    PartialNode,
    Ref,
    Skeleton,
    Static,
    Template,
)

if TYPE_CHECKING:
    from ._lifted import Lifted

__all__ = ["explain_concretization", "pformat", "reject"]


def _leaf_str(x: Any) -> str:
    """A dynamic leaf: dtype and shape, and the value of a scalar."""
    if type(x) is _Shown:  # a nested `Lifted`'s leaf, already described
        return x.text
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    if shape is None or dtype is None:  # a Python scalar, converted when used
        return f"{jnp.result_type(x)}[]={x!r}"
    text = f"{dtype}[{','.join(str(d) for d in shape)}]"
    if shape == () and not isinstance(x, Tracer):
        try:
            text += f"={x.item()!r}"
        except Exception:  # a deleted (donated) buffer, a placeholder
            pass
    return text


class _Shown:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


# How far `repr` follows captured functions, and how many captures it shows each.
_DEPTH: Final = 3
_WIDTH: Final = 12


def _template_str(
    skeleton: Skeleton,
    template: Template,
    leaves: tuple[Any, ...],
    depth: int,
    shown: set[int],
) -> str:
    parts: list[str] = []
    for slot in template.slots:
        if type(slot) is int:
            parts.append(_leaf_str(leaves[slot]))
        elif type(slot) is Ref:
            parts.append(_node_str(skeleton, slot.index, leaves, depth + 1, shown))
        else:
            text = repr(cast(Static, slot).value)
            parts.append(text if len(text) <= 60 else text[:57] + "...")
    if template.treedef is None:
        return parts[0]
    return repr(template.treedef.unflatten([_Shown(p) for p in parts]))


def _node_str(
    skeleton: Skeleton, index: int, leaves: tuple[Any, ...], depth: int, shown: set[int]
) -> str:
    """A node and its captures: `name(var=value, ...)`, nested functions to
    `_DEPTH` levels, each node spelled out once."""
    node = skeleton.nodes[index]
    if isinstance(node, FunctionNode):
        head = node.qualname
    elif isinstance(node, MethodNode):
        head = "method"
    elif isinstance(node, PartialNode):
        head = "partial"
    elif isinstance(node, HolderNode):
        head = node.holder.name
    else:
        head = "cell"
    if index in shown or depth > _DEPTH:
        return f"<{head}>"
    shown.add(index)
    parts: list[tuple[str, Template | None]] = []
    if isinstance(node, FunctionNode):
        for c in node.cells:
            cell = cast(CellNode, skeleton.nodes[c])
            parts.append((cell.name, cell.template))
    for label, template in node.parts():
        parts.append((label.variable or label.text.lstrip("."), template))
    # Every capture of the root; the first few of a nested function.
    width = len(parts) if depth == 0 else _WIDTH
    items = [
        f"{name}=<empty>"
        if template is None
        else f"{name}={_template_str(skeleton, template, leaves, depth, shown)}"
        for name, template in parts[:width]
    ]
    if len(parts) > width:
        items.append(f"...({len(parts) - width} more)")
    return f"{head}({', '.join(items)})"


def pformat(x: Lifted[Any, Any]) -> str:
    """`Cls(qualname(var=value, ...))`: dynamic captures as dtype and shape
    (`float32[]=0.001`), static ones as their value."""
    leaves = x._flat if x._flat is not None else x._leaves
    return f"{type(x).__name__}({_node_str(x._skeleton, 0, leaves, 0, set())})"


def explain_concretization(x: Lifted[Any, Any], err: BaseException) -> LiftError | None:
    """Name the capture, and the function that used it, when a traced leaf was
    needed as a concrete Python value."""
    leaves = x._arrays()
    tracers = {id(leaf): i for i, leaf in enumerate(leaves) if isinstance(leaf, Tracer)}
    if not tracers:
        return None
    skeleton = x._skeleton
    codes = {n.info.code for n in skeleton.nodes if isinstance(n, FunctionNode)}
    owners = skeleton.leaf_owner()
    found: list[tuple[str, int]] = []
    code = innermost = None
    tb = err.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code in codes:
            innermost = frame.f_code
            here = [
                (name, tracers[id(v)])
                for name, v in frame.f_locals.items()
                if id(v) in tracers
            ]
            if here:
                found, code = here, frame.f_code
        tb = tb.tb_next
    # JAX names the argument the value came from (`g.__dict__['b2']`): trust it
    # over the frame's locals, which may hold other captured tracers.
    blamed = _blamed_arguments(str(err))
    if blamed is not None:
        paths = [str(p) for p in leaf_paths(skeleton)]
        ours = [
            i for i in range(len(paths)) if any(b.endswith(paths[i]) for b in blamed)
        ]
        if not ours:
            return None  # a traced argument of the function, not a capture
        found = [(n, i) for n, i in found if i in ours] or [("", ours[0])]
        code = code or innermost
    if not found or code is None:
        return None
    index = found[0][1]
    name = owners[index][1] or found[0][0]
    # The function whose frame needed the value (a cell may be shared by several).
    where = f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})"
    names = tuple(dict.fromkeys(owners[i][1] or n for n, i in found))
    aval = getattr(leaves[index], "aval", "?")
    if isinstance(err, jax.errors.TracerBoolConversionError):
        use = "in Python control flow (`if`, `while`, `and`, `bool()`, ...)"
        other = "replace the Python branch with `jnp.where` / `jax.lax.cond`"
    elif isinstance(err, jax.errors.TracerIntegerConversionError):
        use = "as a Python int (`int()`, an index, a `range`, a shape)"
        other = "compute with it as an array"
    else:
        use = "where a concrete value is needed (a shape, a size, `float()`, NumPy)"
        other = "compute with it as an array"
    return LiftError(
        f"{where} uses the captured variable {name!r} {use}, but lift made it a "
        f"traced value ({aval}), so its value is unknown while tracing.\nFix: keep "
        f"it static, `lift(f, static={names!r})` (each new value then compiles "
        f"anew), or {other}."
    )


_DEPENDS: Final = re.compile(
    r"depends on the values? of the arguments? (.+?)\.(?:\n|$)"
)


def _blamed_arguments(message: str) -> list[str] | None:
    """The argument paths JAX's message says a concrete value depended on."""
    match = _DEPENDS.search(message)
    if match is None:
        return None
    return [p.strip() for p in re.split(r", | and ", match[1]) if p.strip()]


def reject(obj: Any, name: str) -> LiftError:
    """The error for something `name(...)` (`lift` or a `Lifted` subclass) cannot take.

    Reads the object through its type only: it may be a proxy whose attributes
    fail.
    """
    t: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
    try:
        shown = f"{obj!r:.60}"
    except Exception:
        shown = f"<{t.__name__} object>"
    package = str(getattr(t, "__module__", "")).partition(".")[0]

    def wrapped() -> tuple[str, str]:
        # The function a JAX wrapper holds: its name for a fix to paste (`f` if it
        # has none), and where it is defined.
        try:
            inner = getattr(obj, "__wrapped__", obj)
            fn, where = inner.__name__, describe(inner)
        except Exception:
            return "f", shown
        return (fn if isinstance(fn, str) and fn.isidentifier() else "f"), where

    if issubclass(t, type):
        anchor = "lift-got-a-class"
        what = (
            f"the class {obj.__qualname__}. A class is not a function lift can take "
            f"apart.\nFix: lift a function or bound method, e.g. "
            f"`{name}(instance.method)`, or make the class a pytree (e.g. an "
            "equinox.Module)."
        )
    elif package in ("jax", "jaxlib") and hasattr(t, "lower") and callable(obj):
        # `jax.jit(f)`: a `PjitFunction` of jaxlib (0.10.2), which holds `f`
        # where lift cannot make its captures leaves.
        fn, where = wrapped()
        anchor = "lift-got-a-jax-jit-function"
        what = (
            f"jax.jit({fn}), a compiled function ({where}): jax.jit keeps what "
            f"{fn} captures as constants of its program, out of lift's reach.\n"
            f"Fix: compile with lift instead, `lift.jit({fn})`, or lift before "
            f"jitting: `{name}({fn})`, passed to your jitted code as an argument."
        )
    elif package == "jax" and t.__name__ in ("custom_jvp", "custom_vjp"):
        fn, where = wrapped()
        anchor = "lift-got-a-custom-derivative"
        what = (
            f"jax.{t.__name__}({fn}) ({where}), whose derivative rules JAX holds "
            "where lift cannot make their captures leaves.\nFix: convert it by "
            f"tracing, `lift.closure_convert({fn}, *example_args)`, or pass what "
            "it captures as arguments and lift the function that calls it."
        )
    elif issubclass(t, (types.BuiltinFunctionType, types.BuiltinMethodType)) or (
        callable(obj)
        and not hasattr(t, "__code__")
        and t.__module__ in ("builtins", "numpy")
    ):
        anchor = "lift-got-a-builtin"
        builtin = getattr(obj, "__name__", None)
        call = builtin if isinstance(builtin, str) and builtin.isidentifier() else "fn"
        what = (
            f"the builtin {getattr(obj, '__qualname__', shown)!r}, which has no Python "
            f"closure to lift.\nFix: call it from a Python function and lift that: "
            f"`{name}(lambda *a: {call}(*a))`."
        )
    elif callable(obj):
        anchor = "lift-got-a-callable-object"
        what = (
            f"a callable {t.__name__} object that is not a pytree, so "
            "its state cannot become leaves.\nFix: lift its method, "
            f"`{name}(obj.__call__)`, or make its class a pytree (e.g. an "
            "equinox.Module)."
        )
    else:
        anchor = "lift-got-a-value"
        what = (
            f"{t.__qualname__} {shown}, which is neither a function nor "
            "a pytree holding functions.\nFix: pass a function, bound method, "
            "functools.partial, or a pytree (tuple, dict, NamedTuple, ...) of them."
        )
    return LiftError(f"{name}() got {what}{docs_anchor(anchor)}")
