"""How lift describes a `Lifted` to people: its repr, and the errors it raises
about a function's captures."""

# pyright: reportPrivateUsage=false
from __future__ import annotations

import re
import threading
import types
from typing import Any, Final, cast

import jax
import jax.numpy as jnp
import numpy as np

from ._code import code_info
from ._compat import Tracer
from ._errors import LiftError, describe, docs_anchor, static_fix, static_str
from ._nodes import CellNode, FunctionNode, Ref, Static, Template
from ._paths import leaf_paths
from ._skeleton import LiftedParts, Skeleton, node_head

__all__ = ["explain_concretization", "pformat", "reject"]


def _leaf_str(x: Any) -> str:
    """A dynamic leaf: dtype and shape, and the value of a scalar
    (`float32[]=0.001`, printed as its own dtype prints it)."""
    if type(x) is _Shown:  # a nested `Lifted`'s leaf, already described
        return x.text
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    if shape is None or dtype is None:
        if type(x) in (float, complex):  # a Python scalar, converted when used
            return f"{jnp.result_type(x)}[]={x!r}"
        # Not an array: what `jax.tree.map` put there (an `in_axes` prefix's
        # `0` or `None`), shown as it is.
        return static_str(x)
    text = f"{dtype}[{','.join(str(d) for d in shape)}]"
    if shape == () and not isinstance(x, Tracer):
        try:
            # `str`: `f"{np.float32(0.1)}"` formats a Python float, 0.10000000149011612.
            text += "=" + str(np.asarray(x)[()])
        except Exception:  # a deleted (donated) buffer, a placeholder
            pass
    return text


def _static_part(value: Any) -> str:
    """A static capture: a list, dict or set (the user's own object) item by
    item, its first `_ITEMS` items and a count of the others."""
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if t is not list and t is not dict and t is not set:
        return static_str(value)
    items: list[Any] = list(value.items() if t is dict else value)  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
    if not items:
        return "set()" if t is set else "[]" if t is list else "{}"
    shown = [
        f"{static_str(k)}: {static_str(v)}" if t is dict else static_str(k)
        for k, v in (
            items[:_ITEMS] if t is dict else ((i, None) for i in items[:_ITEMS])
        )
    ]
    if len(items) > _ITEMS:
        shown.append(f"...({len(items) - _ITEMS} more)")
    opening, closing = ("[", "]") if t is list else ("{", "}")
    return f"{opening}{', '.join(shown)}{closing}"


class _Shown:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


# How far `repr` follows captured functions, how many captures it shows each,
# and how many items of one captured container.
_DEPTH: Final = 3
_WIDTH: Final = 12
_ITEMS: Final = 16
_CUT: Final = "\x00"
_RUNS: Final = re.compile(r"(?:[^,()\[\]{}\x00]*\x00(?:, )?)+")


def _elide(match: re.Match[str]) -> str:
    text = match[0]
    lead = " " if text.startswith(" ") else ""
    tail = ", " if text.endswith(", ") else ""
    return f"{lead}...({text.count(_CUT)} more){tail}"


class _Depth(threading.local):
    level = 0  # nested `Lifted` being formatted (a `Lifted` captured in a pytree)


_depth: Final = _Depth()


def _template_str(
    skeleton: Skeleton,
    template: Template,
    leaves: tuple[Any, ...],
    depth: int,
    shown: set[int],
) -> str:
    order = template.order
    perm = order[1] if order is not None else range(len(template.slots))
    shown_at = {p: i for i, p in enumerate(perm)}  # where each slot is printed
    parts: list[_Shown] = []
    for pos, slot in enumerate(template.slots):
        if shown_at[pos] >= _ITEMS:
            parts.append(_Shown(_CUT))
        elif type(slot) is int:
            parts.append(_Shown(_leaf_str(leaves[slot])))
        elif type(slot) is Ref:
            parts.append(
                _Shown(_node_str(skeleton, slot.index, leaves, depth + 1, shown))
            )
        else:
            parts.append(_Shown(_static_part(cast(Static, slot).value)))
    if template.treedef is None:
        return parts[0].text
    outer, _depth.level = _depth.level, depth + 1
    try:
        if order is not None:
            text = repr(order[0].unflatten([parts[p] for p in perm]))
        else:
            text = repr(template.treedef.unflatten(parts))
    finally:
        _depth.level = outer
    return _RUNS.sub(_elide, text) if len(parts) > _ITEMS else text


def _node_str(
    skeleton: Skeleton, index: int, leaves: tuple[Any, ...], depth: int, shown: set[int]
) -> str:
    """A node and its captures: `name(var=value, ...)`, nested functions to
    `_DEPTH` levels, each node spelled out once."""
    node = skeleton.nodes[index]
    head = node_head(node)
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


def pformat(x: LiftedParts) -> str:
    """`Cls(qualname(var=value, ...))`: dynamic captures as dtype and shape, with
    the value of a scalar (`float32[]=0.001`), static ones as their value
    (`nesterov=False`)."""
    leaves = x._flat if x._flat is not None else x._leaves
    level = _depth.level
    if level > _DEPTH:  # a `Lifted` inside a capture, deep down
        return f"{type(x).__name__}(<{node_head(x._skeleton.nodes[0])}>)"
    return f"{type(x).__name__}({_node_str(x._skeleton, 0, leaves, level, set())})"


def repr_pretty(x: LiftedParts, p: Any, cycle: bool) -> None:
    """IPython's pretty printer: the repr (a cycle as the name only)."""
    if cycle:
        p.text(f"{type(x).__name__}(<{node_head(x._skeleton.nodes[0])}>)")
    else:
        p.text(pformat(x))


def explain_concretization(x: LiftedParts, err: BaseException) -> LiftError | None:
    """Name the capture, and the function that used it, when a traced leaf was
    needed as a concrete Python value; `None` when the value came from no
    capture (an argument traced by `vmap` or `jit`).

    Which capture is lift's own knowledge: the innermost frame of the graph's
    code where the error passed, the instruction it stopped at, and the
    variables that instruction's operands were computed from (`CodeInfo.
    operands`), each matched by identity against the `Lifted`'s leaves. Only
    where the bytecode cannot tell (a value read through an attribute) are the
    frame's captured tracers, and the argument JAX's message names, consulted.
    """
    leaves = x._arrays()
    tracers = {id(leaf): i for i, leaf in enumerate(leaves) if isinstance(leaf, Tracer)}
    if not tracers:
        return None
    skeleton = x._skeleton
    codes = {n.info.code for n in skeleton.nodes if isinstance(n, FunctionNode)}
    owners = skeleton.leaf_owner()
    last: types.TracebackType | None = None
    tb = err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in codes:
            last = tb
        tb = tb.tb_next
    if last is None:
        return None
    frame, code = last.tb_frame, last.tb_frame.f_code
    local = frame.f_locals
    sources = code_info(code).operands(last.tb_lasti)
    found = [
        (name, i)
        for _, name in sorted(sources)
        if name in local
        for i in _leaves_in(local[name], tracers)
    ]
    # Of those, the ones JAX was converting, where its frames show them.
    converted = [(n, i) for n, i in found if id(leaves[i]) in _converted(last)]
    found = converted or found
    if sources and (
        not found or any(_foreign(local.get(n), tracers) for _, n in sources)
    ):
        # Computed from arguments (or static values) alone, or from a traced
        # argument too: making a capture static would not help.
        return None
    if not found:
        found = _guessed(err, skeleton, local, tracers)
    if not found:
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
        use = (
            "where a concrete value is needed (a shape, a size, `float()`, "
            "`.item()`, NumPy)"
        )
        other = "compute with it as an array"
    return LiftError(
        f"{where} uses the captured variable {name!r} {use}, but lift made it a "
        f"traced value ({aval}), so its value is unknown while tracing.\nFix: keep "
        f"it static, {static_fix(names)} (each new value then compiles "
        f"anew), or {other}.",
        anchor="control-flow-on-a-capture",
        static=names,
    )


def _leaves_in(value: Any, tracers: dict[int, int]) -> list[int]:
    """The indices of the `Lifted`'s traced leaves that `value` is or holds."""
    index = tracers.get(id(value))
    if index is not None:
        return [index]
    if isinstance(value, Tracer) or not isinstance(value, (tuple, list, dict)):
        return []
    try:
        held = jax.tree_util.tree_leaves(value)
    except Exception:  # a container JAX cannot flatten: holds no leaf of ours
        return []
    return [tracers[id(v)] for v in held if id(v) in tracers]


def _converted(tb: types.TracebackType) -> set[int]:
    """The ids of the tracers held by the frames below `tb` (JAX's own, where
    it converts a value: `Tracer.__index__`'s `self`), one container deep."""
    out: set[int] = set()
    below = tb.tb_next
    while below is not None:
        for v in below.tb_frame.f_locals.values():
            if isinstance(v, Tracer):
                out.add(id(v))
            elif type(v) is tuple:
                out.update(id(w) for w in v if isinstance(w, Tracer))  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        below = below.tb_next
    return out


def _foreign(value: Any, tracers: dict[int, int]) -> bool:
    """Whether `value` is a tracer that is not a leaf of the `Lifted` (an
    argument the transform traces)."""
    return isinstance(value, Tracer) and id(value) not in tracers


def _guessed(
    err: BaseException,
    skeleton: Skeleton,
    local: dict[str, Any],
    tracers: dict[int, int],
) -> list[tuple[str, int]]:
    """Where the bytecode cannot tell: the captured tracers of the frame that
    JAX's message says the value depended on (its argument `__lifted__[k]` is
    leaf `k` under `lift.jit`), or all the frame's captured tracers."""
    here = [(n, tracers[id(v)]) for n, v in local.items() if id(v) in tracers]
    blamed = _blamed_arguments(str(err))
    if blamed is None:
        return here
    paths = [str(p) for p in leaf_paths(skeleton)]
    ours: list[int] = []
    for b in blamed:
        k = _LIFTED_ARGUMENT.fullmatch(b)
        if k is not None and int(k[1]) < len(paths):
            ours.append(int(k[1]))
        ours.extend(i for i in range(len(paths)) if b.endswith(paths[i]))
    if not ours:
        return []  # a traced argument of the function, not a capture
    return [(n, i) for n, i in here if i in ours] or [("", ours[0])]


# `lift.jit`'s programs take a function's leaves as their first argument.
_LIFTED_ARGUMENT: Final = re.compile(r"__lifted___*\[(\d+)\]")
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


def treescope_repr(x: LiftedParts, path: str | None, subtree_renderer: Any) -> Any:
    """treescope's rendering of a `Lifted` (its `__treescope_repr__`): the
    function's qualified name and its captures, captured functions nested to
    `_DEPTH` levels. treescope is imported here, never by `import lift`."""
    from treescope import (  # pyright: ignore[reportMissingTypeStubs]
        rendering_parts,
        repr_lib,
    )

    name = type(x).__name__
    if _depth.level > _DEPTH:
        return rendering_parts.text(f"{name}(<{node_head(x._skeleton.nodes[0])}>)")
    attributes: dict[str, Any] = {"__qualname__": x.__qualname__}
    for part in ("args", "keywords", "func", "__func__", "__self__"):
        value = getattr(x, part, _MISSING)
        if value is not _MISSING:
            attributes[part] = value
    keywords = attributes.get("keywords", {})
    captures = {k: v for k, v in x.captures.items() if k not in keywords}
    if captures:
        attributes = {
            "__qualname__": x.__qualname__,
            "captures": captures,
            **attributes,
        }
    _depth.level += 1
    try:
        return repr_lib.render_object_constructor(
            object_type=type(x),
            attributes=attributes,
            path=path,
            subtree_renderer=subtree_renderer,
        )
    finally:
        _depth.level -= 1


_MISSING: Final = object()
