"""`lift.diff`: why two pytrees would compile separately, in the user's terms.

`lift.stack` stacks pytrees that one program serves, or says why not with
`lift.diff`'s words."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Sequence
from typing import Any, Final, TypeVar, cast

import jax
import jax.numpy as jnp
import numpy as np

from .._base.errors import LiftError, static_str, type_text
from .._compat import entry_point
from .._holders import trees as jtu
from .._holders.reach import items, reach
from .._lifted.lift import flatten_lifted, is_lifted, stops_flattening
from .._lifted.lifted import Lifted
from .._rule.static import ArrayImpl
from .._skeleton.nodes import Ref
from .._skeleton.skeleton import skeleton_of
from .skeletons import (
    SHARED,
    Slot,
    a_or_an,
    at_path,
    diff_slots,
    is_function,
    join_path,
    slot_str,
    static_unequal,
)


@entry_point
def diff(a: Any, b: Any) -> str | None:
    """Why `a` and `b` would compile separately, or `None`.

    It compares two pytrees: two `Lifted`, two optimizers, two training states.
    It compares their treedefs and their leaves' types. Those are `jax.jit`'s
    cache key. Each difference is one line. The line starts with the key path
    (`.update.captures['b2']`). It names the variable and both values. It says
    why the value is static: an `int`, `static=`, an `if` at `file:line`.

    A function held in a pytree's static metadata is named, with the fix. Such
    a function compiles anew for every new object. A leaf of another shape,
    dtype or weak type is named. So is a leaf on another device. So is a dict
    with the same keys in another order. `None` means one `jax.jit` program
    serves both.

    ```python
    import lift

    def make(lr, steps):
        return lift.lift(lambda x: x * lr / steps)

    assert lift.diff(make(0.1, 10), make(0.2, 10)) is None  # lr is dynamic
    print(lift.diff(make(0.1, 10), make(0.1, 20)))
    ```

    ```text
    .captures['steps']: steps = 10 vs 20, static because it is an int, not a float or array (in make.<locals>.<lambda> at ...)
    ```

    **Arguments:**

    - `a`, `b`: any two pytrees, `Lifted` or holding them.

    **Returns:** one line per difference, or `None` when nothing differs.
    """
    flatten_lifted(a, "diff")  # refuses containers JAX cannot flatten, by name
    flatten_lifted(b, "diff")
    la, ta = jtu.tree_flatten_with_path(a, is_leaf=_iterator)
    lb, tb = jtu.tree_flatten_with_path(b, is_leaf=_iterator)
    lines: list[str] = []
    if not _same(ta, tb):
        _diff_trees(a, b, lines)
        if not lines:  # not expected: say what JAX compares
            lines.append(f"the pytree structures differ: {ta} != {tb}")
    if len(la) == len(lb):
        for (path, x), (_, y) in zip(la, lb, strict=True):
            if (apart := _leaf_apart(x, y)) is not None:
                lines.append(f"{at_path(jtu.keystr(path))}{apart}")
    return "\n".join(lines) if lines else None


def _leaf_apart(x: Any, y: Any) -> str | None:
    """Why `jax.jit` traces anew for leaf `y` in place of `x`.

    The reason is another shape, dtype, weak type or placement. A Python float
    is weakly typed; `np.float32(0.2)` is not."""
    kx, ky = _leaf_type(x), _leaf_type(y)
    if kx != ky:
        return (
            f"a leaf of type {kx} in one, {ky} in the other (jax.jit compiles a "
            "program per leaf shape, dtype and weak type)"
        )
    cx, cy = _committed(x), _committed(y)
    if not (cx or cy) or (
        cx
        and cy
        and type(x.sharding) is type(y.sharding)
        and x.sharding.is_equivalent_to(y.sharding, x.ndim)  # `P()` is `P(None)`
    ):
        return None
    return (
        f"a leaf {_placement_text(x, y)} in one, {_placement_text(y, x)} in the "
        "other (jax.jit compiles a program per placement of an array committed "
        "to its devices)"
    )


def _committed(x: Any) -> bool:
    """Whether `x` is an array committed to its sharding.

    `jax.device_put` commits an array. So does computing from one."""
    return type(x) is ArrayImpl and x.committed


def _placement_text(x: Any, other: Any) -> str:
    if not _committed(x):
        return "not committed to a device"
    sharding = x.sharding
    devices = sorted(sharding.device_set, key=lambda d: d.id)
    where = f"to {devices[0]}"
    if len(devices) > 1:
        where = f"to {len(devices)} devices as {static_str(sharding, 100)}"
    if _committed(other) and other.sharding.device_set == sharding.device_set:
        where += f" by a {type(sharding).__name__}"  # the same devices: the kinds
    return f"committed {where}"


def _leaf_type(x: Any) -> str:
    """What `jax.jit` keys a leaf on, as `jax.typeof` prints it.

    `~` marks a weak type."""
    try:
        aval: Any = jax.typeof(x)
    except Exception:  # not a JAX value (`2**100`, an object): jit refuses it
        return type(x).__name__
    return type_text(aval)


# -- pytrees ------------------------------------------------------------------------


def _same(ta: jtu.TreeDef, tb: jtu.TreeDef) -> bool:
    """`ta == tb`, or false when JAX cannot compare them.

    Static metadata whose `__eq__` fails cannot share a program either."""
    try:
        return ta == tb
    except Exception:
        return False


def _iterator(x: Any) -> bool:
    """A stateful iterator: a leaf, as lift's own flattening takes it."""
    return stops_flattening(x) and not is_lifted(x)


def _diff_trees(a: Any, b: Any, lines: list[str]) -> None:
    """Walk `a` and `b` together, saying where their treedefs part.

    They part by node type, static metadata or number of children. Two
    `Lifted` of one class part by their skeletons' nodes."""
    stack: list[tuple[str, Any, Any]] = [("", a, b)]
    seen: set[tuple[int, int, int, int]] = set()
    while stack:
        path, x, y = stack.pop()
        if type(x) is Slot and type(y) is Slot:
            diff_slots(path, x, y, lines, stack, seen)
            continue
        if y is SHARED:  # two skeletons walked: unequal, yet nothing said
            if len(lines) == x:
                lines.append(f"{at_path(path)}{SHARED}")
            continue
        if is_lifted(x) and type(x) is type(y):
            sx, sy = skeleton_of(cast(Lifted[Any, Any], x)), skeleton_of(y)
            if sx != sy:
                root = (Slot(sx, 0, "it", Ref(0)), Slot(sy, 0, "it", Ref(0)))
                stack += [(path, len(lines), SHARED), (path, *root)]
            continue
        if is_lifted(x) or is_lifted(y) or stops_flattening(x) or stops_flattening(y):
            if _what(x) != _what(y) or type(x) is not type(y):
                lines.append(_apart(path, x, y))
            continue
        # Each flattened one level: the children with their keys.
        cx, sx = jtu.tree_flatten_with_path(x, is_leaf=jtu.one_level(x))
        cy, sy = jtu.tree_flatten_with_path(y, is_leaf=jtu.one_level(y))
        same = _same(sx, sy)
        if same and jtu.treedef_is_leaf(sx):
            continue
        dx, dy = sx.node_data(), sy.node_data()
        if dx is None or dy is None or dx[0] is not dy[0]:
            lines.append(_apart(path, x, y))
            continue
        if not same:
            _diff_metadata(path, x, y, dx[1], dy[1], lines)
        if [k for k, _ in cx] == [k for k, _ in cy]:  # else said just above
            for (kx, vx), (_, vy) in reversed(list(zip(cx, cy, strict=True))):
                stack.append((join_path(path, jtu.keystr(kx)), vx, vy))


def _apart(path: str, x: Any, y: Any) -> str:
    return f"{at_path(path)}{_what(x)} in one, {_what(y)} in the other"


def _what(x: Any) -> str:
    """A value as a diff names it (`a list of 3`, `float32[3]`)."""
    # Through the type only where it can: `x` may be any object, even one whose
    # attributes raise.
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    if t is Slot:
        return slot_str(x)
    if issubclass(t, Lifted):
        return f"a {t.__name__} ({x.__qualname__})"
    if is_function(x):
        return f"the function {getattr(x, '__qualname__', t.__name__)}"
    if x is None:
        return "None"
    if issubclass(t, (list, tuple, dict)):
        return f"a {t.__name__} of {len(cast('list[Any]', x))}"
    text = type_text(x)  # an array's type, as every message names it
    return a_or_an(text) if text == t.__name__ else text


_FIX: Final = (
    "Fix: make {field} a pytree field (flax: `struct.field(pytree_node=True)`, "
    "or `nnx.data()`; `lift.flax.TrainState` and `lift.flax.Optimizer` do; "
    "equinox: drop `static=True`), or pass the {kind} to the jitted function as "
    "an argument."
)


def _diff_metadata(
    path: str, x: Any, y: Any, mx: Any, my: Any, lines: list[str]
) -> None:
    """Say why two nodes of one type have unequal static metadata.

    It compares what the metadata holds pair by pair with `==`, as JAX does."""
    functions: dict[str | None, list[str]] = {}  # by the field holding them
    why_functions: list[str] = []
    why: list[str] = []
    for u, v in zip(_atoms(mx), _atoms(my), strict=False):
        unequal, reason = static_unequal(u, v)
        if unequal and is_function(u) and is_function(v):
            field = _field_of(x, u) or _field_of(y, v)
            functions.setdefault(field, []).append(_what(u))
            why_functions += [reason] if reason else []
            if type(u) is types.MethodType:
                why_functions.append(
                    "a bound method is equal to one of the same function bound to "
                    "the same object"
                )
        elif unequal and reason:
            why.append(reason)
    name = type(x).__name__
    for field, names in functions.items():
        held = getattr(x, field, None) if field else None
        optimizer = hasattr(held, "init") and hasattr(held, "update")
        lines.append(
            f"{at_path(f'{path}.{field}' if field else path)}{', '.join(names)} "
            f"{'is' if len(names) == 1 else 'are'} held in the static metadata of "
            f"{name} ({'field ' + repr(field) if field else 'a field that'} is not "
            "a pytree field), which JAX compares with `==`: a function is equal "
            "only to itself, so every new one compiles anew, whatever it captures"
            + "".join(f"; {w}" for w in dict.fromkeys(why_functions))
            + ".\n"
            + _FIX.format(
                field=f"`{field}`" if field else "the field that holds it",
                kind="optimizer" if optimizer else "function",
            )
        )
    if functions:
        return
    kx, ky = _keys(x), _keys(y)
    if kx != ky:
        only = [
            f"the key{'s' if len(keys) > 1 else ''} "
            f"{', '.join(sorted(map(repr, keys)))} {'are' if len(keys) > 1 else 'is'}"
            f" in {side} only"
            for keys, side in ((kx - ky, "one"), (ky - kx, "the other"))
            if keys
        ]
        lines.append(f"{at_path(path)}the dicts' keys differ: {', '.join(only)}")
    elif _what(x) != _what(y):  # a list or tuple of another length
        lines.append(_apart(path, x, y))
    else:
        lines.append(
            f"{at_path(path)}{name}'s static metadata differs: {static_str(mx)} vs "
            f"{static_str(my)}" + "".join(f"; {w}" for w in dict.fromkeys(why))
        )


def _keys(x: Any) -> set[Any]:
    """A dict's keys (none for other nodes)."""
    return set(cast("dict[Any, Any]", x)) if isinstance(x, dict) else set()


_SCAN_LIMIT: Final = 10_000


def _atoms(data: Any) -> list[Any]:
    """What static metadata holds, in order, through tuples (NamedTuples too),
    lists, sets and dicts (their values); functions (`Lifted` included) whole."""
    walked = reach([data], _metadata_items, _SCAN_LIMIT)  # items last first
    return [v for v in walked if _metadata_items(v) is None][::-1]


def _metadata_items(v: Any) -> Any:
    if is_function(v) or (issubclass(type(v), dict) and type(v) is not dict):
        return None
    return items(v)


def _field_of(x: Any, value: Any) -> str | None:
    """The attribute of `x` that holds `value` (directly or in a container)."""
    if dataclasses.is_dataclass(x):
        names = [f.name for f in dataclasses.fields(x)]
    else:
        names = list(getattr(x, "__dict__", {}))
    for name in names:
        try:
            held = getattr(x, name)
        except Exception:
            continue
        if held is value or any(f is value for f in _atoms(held)):
            return name
    return None


_T = TypeVar("_T")


def stack(trees: Sequence[_T], /) -> _T:
    """One pytree holding `trees` stacked along a new first axis.

    A population for `jax.vmap`, or for sharding over devices: N optimizers
    (or models, or training states) of one structure become one, each leaf
    an array of N rows. Row `i` is `trees[i]`
    (`jax.tree.map(lambda x: x[i], stacked)` takes it out). They must share
    one treedef and each leaf's shape and dtype: one program serves them all.
    Where they do not, the error says why with `lift.diff`'s words.

    ```python
    import jax
    import optax

    import lift

    opts = lift.stack([lift.lift(optax.adam(lr)) for lr in (0.1, 0.01, 0.001)])
    params = {"w": jax.numpy.ones((3, 2))}  # three rows: one for each member
    states = jax.vmap(lambda opt, p: opt.init(p))(opts, params)
    print(jax.tree.leaves(states)[1].shape)
    ```

    ```text
    (3, 2)
    ```

    **Arguments:**

    - `trees`: a non-empty sequence of pytrees, `Lifted` or holding them.

    **Returns:** the first tree's structure, each leaf the members' leaves
    stacked with `jnp.stack`.

    **Raises:** `LiftError` when two members differ in structure, or in a
    leaf's shape or dtype.
    """
    members = list(trees)
    if not members:
        raise LiftError(
            "lift.stack() got no trees: give it a sequence of one or more",
            anchor="stack-differs",
        )
    for member in members:
        flatten_lifted(member, "stack")  # refuses containers JAX cannot flatten
    first, treedef = jtu.tree_flatten(members[0])
    rows = [first]
    for i, member in enumerate(members[1:], start=1):
        leaves, other = jtu.tree_flatten(member)
        if other != treedef or not all(map(_stackable, first, leaves)):
            why = diff(members[0], member) or (
                f"the pytree structures differ: {treedef} != {other}"
            )
            raise LiftError(
                f"lift.stack(): trees[0] and trees[{i}] cannot be stacked, since "
                f"one program cannot serve both:\n{why}\nFix: build every member "
                "the same way, with the values that differ as floats or arrays "
                "(dynamic), not ints, strings or functions (static).",
                anchor="stack-differs",
            )
        rows.append(leaves)
    stacked = [jnp.stack(c) for c in zip(*rows, strict=True)]  # pyright: ignore[reportUnknownMemberType]
    return jtu.unflatten(treedef, stacked)


def _stackable(a: Any, b: Any) -> bool:
    """Same shape and dtype (a weakly typed float stacks with a float32)."""
    same_dtype: bool = jnp.result_type(a) == jnp.result_type(b)  # pyright: ignore[reportUnknownMemberType]
    return np.shape(a) == np.shape(b) and same_dtype
