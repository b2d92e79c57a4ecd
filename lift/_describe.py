"""How lift describes a `Lifted` to people: its repr, and the errors it raises
about a function's captures."""

# pyright: reportPrivateUsage=false
from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any, cast

from ._compat import Tracer
from ._errors import LiftError, describe, docs_anchor
from ._skeleton import (
    CellNode,
    FunctionNode,
    MethodNode,
    PartialNode,
    Ref,
    Skeleton,
    Static,
    Template,
    root_name,
)

if TYPE_CHECKING:
    from ._lifted import Lifted

__all__ = ["explain_concretization", "pformat", "reject"]


def _leaf_str(x: Any) -> str:
    if isinstance(x, (float, complex, int)) and not isinstance(x, bool):
        return repr(x)
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{dtype}[{','.join(str(d) for d in shape)}]"
    return repr(x)


class _Shown:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _node_str(skeleton: Skeleton, index: int) -> str:
    node = skeleton.nodes[index]
    if isinstance(node, FunctionNode):
        return f"<function {node.qualname}>"
    if isinstance(node, MethodNode):
        return "<bound method>"
    return "<partial>"


def _template_str(
    skeleton: Skeleton, template: Template, leaves: tuple[Any, ...]
) -> str:
    parts: list[str] = []
    for slot in template.slots:
        if type(slot) is int:
            parts.append(_leaf_str(leaves[slot]))
        elif type(slot) is Ref:
            parts.append(_node_str(skeleton, slot.index))
        else:
            text = repr(cast(Static, slot).value)
            parts.append(text if len(text) <= 60 else text[:57] + "...")
    if template.treedef is None:
        return parts[0]
    return repr(template.treedef.unflatten([_Shown(p) for p in parts]))


def pformat(x: Lifted[Any, Any]) -> str:
    skeleton, leaves = x._skeleton, x._leaves
    root = skeleton.nodes[0]
    items: list[str] = []
    if isinstance(root, FunctionNode):
        for name, index in zip(root.info.freevars, root.cells, strict=True):
            cell = skeleton.nodes[index]
            assert isinstance(cell, CellNode)
            text = (
                "<empty>"
                if cell.template is None
                else _template_str(skeleton, cell.template, leaves)
            )
            items.append(f"{name}={text}")
        for template in (
            *(root.defaults or ()),
            *(t for _, t in root.kwdefaults or ()),
        ):
            items.append(f"{template.name}={_template_str(skeleton, template, leaves)}")
    elif isinstance(root, PartialNode):
        items.append(f"func={_template_str(skeleton, root.func, leaves)}")
        items.extend(_template_str(skeleton, t, leaves) for t in root.args)
        items.extend(
            f"{k}={_template_str(skeleton, t, leaves)}" for k, t in root.keywords
        )
    elif isinstance(root, MethodNode):
        items.append(f"__func__={_template_str(skeleton, root.func, leaves)}")
        items.append(f"__self__={_template_str(skeleton, root.self_, leaves)}")
    inner = ", ".join([root_name(skeleton, "qualname"), *items])
    return f"{type(x).__name__}({inner})"


def explain_concretization(x: Lifted[Any, Any], err: BaseException) -> LiftError | None:
    """Name the capture when a traced leaf was used in Python control flow."""
    tracers = {
        id(leaf): i for i, leaf in enumerate(x._leaves) if isinstance(leaf, Tracer)
    }
    if not tracers:
        return None
    skeleton = x._skeleton
    codes = {n.info.code for n in skeleton.nodes if isinstance(n, FunctionNode)}
    owners = skeleton.leaf_owner()
    found: list[tuple[str, int]] = []
    tb = err.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code in codes:
            here = [
                (name, tracers[id(v)])
                for name, v in frame.f_locals.items()
                if id(v) in tracers
            ]
            if here:
                found = here
        tb = tb.tb_next
    if not found:
        return None
    index = found[0][1]
    owner = skeleton.nodes[owners[index][0]]
    name = owners[index][1] or found[0][0]
    where = (
        f"{owner.qualname} ({owner.info.code.co_filename}:{owner.info.code.co_firstlineno})"
        if isinstance(owner, FunctionNode)
        else describe(x)
    )
    names = tuple(dict.fromkeys(owners[i][1] or n for n, i in found))
    return LiftError(
        f"{where} uses the captured variable {name!r} in Python control flow "
        f"(`if`, `while`, `bool()`, ...), but lift made it a traced value "
        f"({getattr(x._leaves[index], 'aval', '?')}), so its value is unknown "
        f"while tracing.\nFix: keep it static, `lift(f, static={names!r})` "
        "(each new value then compiles anew), or replace the Python branch with "
        "`jnp.where` / `jax.lax.cond`."
    )


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
