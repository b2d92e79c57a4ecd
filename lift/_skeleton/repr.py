"""The repr of a `Lifted`: its function's name and its captures.

Leaves show dtype and shape (`float32[]=0.001`); statics show as people read
them. Captured functions nest a few levels. treescope's rendering shows the
same."""

from __future__ import annotations

import re
import threading
from typing import Any, Final, cast

import jax.numpy as jnp
import numpy as np

from .._base.errors import array_text, static_str
from .._compat import Tracer
from .nodes import Ref, Static, Template
from .skeleton import LiftedParts, Skeleton, leaves_as_shown, node_head, skeleton_of


def _leaf_str(x: Any) -> str:
    """A dynamic leaf: dtype and shape, and a scalar's value (`float32[]=0.001`)."""
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
    text = array_text(shape, dtype)
    if shape == () and not isinstance(x, Tracer):
        try:
            # `str`: `f"{np.float32(0.1)}"` formats a Python float, 0.10000000149011612.
            text += "=" + str(np.asarray(x)[()])
        except Exception:  # a deleted (donated) buffer, a placeholder
            pass
    return text


def _static_part(value: Any) -> str:
    """A static capture; your own list, dict or set item by item.

    It shows the first `_ITEMS` items and a count of the others."""
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if t is not list and t is not dict and t is not set:
        return static_str(value)
    if t is set and not value:
        return "set()"
    items: list[Any] = list(value.items() if t is dict else value)  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
    shown = [
        f"{static_str(item[0])}: {static_str(item[1])}"
        if t is dict
        else static_str(item)
        for item in items[:_ITEMS]
    ]
    if len(items) > _ITEMS:
        shown.append(f"...({len(items) - _ITEMS} more)")
    opening, closing = "[]" if t is list else "{}"
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
    outer, _depth.level = _depth.level, depth + 1
    try:
        text = repr(template.unflatten(parts))
    except Exception:  # a pytree class whose unflatten checks its children
        kind = cast(Any, template.treedef).node_data()[0]
        text = f"{getattr(kind, '__name__', 'node')}({', '.join(map(repr, parts))})"
    finally:
        _depth.level = outer
    return _RUNS.sub(_elide, text) if len(parts) > _ITEMS else text


def _node_str(
    skeleton: Skeleton, index: int, leaves: tuple[Any, ...], depth: int, shown: set[int]
) -> str:
    """A node and its captures: `name(var=value, ...)`.

    Nested functions go `_DEPTH` levels; each node is spelled out once."""
    node = skeleton.nodes[index]
    head = node_head(node)
    if index in shown or depth > _DEPTH:
        return f"<{head}>"
    shown.add(index)
    parts = [
        (label.variable or label.text.lstrip("."), template)
        for label, template in skeleton.parts_of(index)
    ]
    # Every capture of the root; the first few of a nested function.
    width = len(parts) if depth == 0 else _WIDTH
    info = getattr(node, "info", None)
    items = [
        f"{name}=<empty>"
        if template is None
        else f"{name}={_template_str(skeleton, template, leaves, depth, shown)}"
        + _why(info, name, template)
        for name, template in parts[:width]
    ]
    if len(parts) > width:
        items.append(f"...({len(parts) - width} more)")
    return f"{head}({', '.join(items)})"


def _why(info: Any, name: str, template: Template) -> str:
    """` (static because …)` for a float the code rebinds (`CodeInfo.rebinds`)."""
    slots = template.slots
    value = slots[0].value if len(slots) == 1 and type(slots[0]) is Static else None
    if info is None or type(value) not in (float, complex):
        return ""
    why = info.rebinds(name)
    return f" (static because {why})" if why else ""


def pformat(x: LiftedParts) -> str:
    """`Cls(qualname(var=value, ...))`.

    Dynamic captures show dtype and shape, and a scalar's value. Static ones
    show their value (`nesterov=False`)."""
    if _depth.level > _DEPTH:  # a `Lifted` inside a capture, deep down
        return f"{type(x).__name__}(<{node_head(skeleton_of(x).nodes[0])}>)"
    text = _node_str(skeleton_of(x), 0, leaves_as_shown(x), _depth.level, set())
    return f"{type(x).__name__}({text})"


def treescope_repr(x: LiftedParts, path: str | None, subtree_renderer: Any) -> Any:
    """treescope's rendering of a `Lifted` (its `__treescope_repr__`).

    It shows the qualified name and the captures, nested `_DEPTH` levels.
    treescope is imported here, never by `import lift`."""
    from treescope import (  # pyright: ignore[reportMissingTypeStubs]
        rendering_parts,
        repr_lib,
    )

    name = type(x).__name__
    if _depth.level > _DEPTH:
        return rendering_parts.text(f"{name}(<{node_head(skeleton_of(x).nodes[0])}>)")
    parts: dict[str, Any] = {
        part: value
        for part in ("args", "keywords", "func", "__func__", "__self__")
        if (value := getattr(x, part, _MISSING)) is not _MISSING
    }
    keywords = parts.get("keywords", {})
    captures = {k: v for k, v in x.captures.items() if k not in keywords}
    attributes: dict[str, Any] = {"__qualname__": x.__qualname__}
    if captures:
        attributes["captures"] = captures
    _depth.level += 1
    try:
        return repr_lib.render_object_constructor(
            object_type=type(x),
            attributes={**attributes, **parts},
            path=path,
            subtree_renderer=subtree_renderer,
        )
    finally:
        _depth.level -= 1


_MISSING: Final = object()
