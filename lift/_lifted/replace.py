"""Replacing a `Lifted`'s captured variables by name: `lift.replace`."""

from __future__ import annotations

import difflib
import itertools
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .._base.errors import LiftError, describe
from .._compat import entry_point
from .._holders import trees as jtu
from .._skeleton.paths import CapturePath
from .lift import is_lifted

if TYPE_CHECKING:
    from .lifted import Lifted

_L = TypeVar("_L")

# The first two key entries of a leaf of the root's own captured variable
# `name`: `.captures['name']` (a cell, a default) or `.keywords['name']` (a
# partial's keyword), as `Lifted.captures` names them.
_OWN = (jtu.GetAttrKey("captures"), jtu.GetAttrKey("keywords"))


def _is_none(x: Any) -> bool:
    return x is None


def _variables(entries: tuple[Any, ...]) -> list[tuple[int, str]]:
    """Each captured variable the entries of a `CapturePath` name, by position."""
    return [
        (i, second.key)
        for i, (first, second) in enumerate(itertools.pairwise(entries))
        if first in _OWN and type(second) is jtu.DictKey and isinstance(second.key, str)
    ]


def _owner(path: tuple[Any, ...]) -> str | None:
    """The root's captured variable a leaf belongs to, from its key path.

    The root's `CapturePath` comes first. Then come the keys into a leaf that
    `jax.tree.map` made a pytree (`lambda x: (x, x)`)."""
    found = _variables(cast(CapturePath, path[0]).entries)
    return found[0][1] if found and found[0][0] == 0 else None


def _named(path: tuple[Any, ...]) -> set[str]:
    """Every captured variable on a leaf's key path, at any depth (the names
    `dynamic=` takes): `.update` then `.captures['fns'][1].captures['factor']`
    names `fns` and `factor`."""
    return {
        name
        for part in path
        if type(part) is CapturePath
        for _, name in _variables(part.entries)
    }


@entry_point
def replace(lifted: _L, /, **captures: Any) -> _L:
    """A copy of `lifted` with some of its captured variables replaced, by name.

    The names are the function's own, as
    [`Lifted.captures`][lift.Lifted.captures] has them. They are the free
    variables, defaults and partial keywords of the lifted function. Lift a
    factory's partial, and the names are the arguments you gave it. A lifted
    optax optimizer's names are optax's own (`step_size`, not
    `learning_rate`). A name that is not the function's own is looked for at
    any depth, as `dynamic=` names are. So is any name given a pytree of
    `Lifted`s, such as a built optimizer lifted whole.

    A value replaces every leaf of its variable. It is one value for them all
    (an `in_axes` prefix's `0`), or a pytree with a leaf for each. It works on
    an `in_axes` prefix made by `jax.tree.map`, whose leaves are `None`.

    **Arguments:**

    - `lifted`: a `Lifted`, or a pytree holding them.
    - `**captures`: the new value of each captured variable to replace.

    **Returns:**

    A `Lifted` of the same type and structure, the other leaves unchanged.
    Static captures (a `nesterov=True`) are part of the program. They cannot
    be replaced: lift a new partial instead.

    ```python
    import functools

    import jax
    import optax
    import lift

    adam = lift.lift(functools.partial(optax.adam, learning_rate=0.1))
    print(adam.captures["learning_rate"])
    slower = lift.replace(adam, learning_rate=0.01)
    print(slower.captures["learning_rate"])

    # vmap over the learning rate only: an in_axes prefix.
    axes = lift.replace(jax.tree.map(lambda _: None, adam), learning_rate=0)
    print(axes)
    ```

    ```text
    0.1
    0.01
    Lifted(functools.partial(func=adam(b1=None, b2=None, eps=None, eps_root=None, mu_dtype=None, nesterov=False), learning_rate=0))
    ```
    """
    pairs, treedef = jtu.tree_flatten_with_path(lifted, is_leaf=_is_none)
    if is_lifted(lifted):
        root = cast("Lifted[..., Any]", lifted)
        names = sorted(root.captures)
        fn = describe(root.__wrapped__)
    elif any(map(is_lifted, jtu.tree_leaves(lifted, is_leaf=is_lifted))):
        names, fn = [], type(lifted).__name__
    else:
        raise LiftError(
            f"lift.replace() got {type(lifted).__name__!r}, which holds no Lifted: "
            "it replaces the captured variables of lifted functions, by their "
            "names.\nFix: lift it first, `lift.lift(optimizer)`, or lift the "
            "factory with the names you want, `lift.lift(functools.partial("
            "optax.adam, learning_rate=0.1))`, and replace on that.",
            anchor="replace-unknown-name",
        )
    owners = [_owner(path) if names else None for path, _ in pairs]
    deep = [_named(path) for path, _ in pairs]
    leaves = [leaf for _, leaf in pairs]
    for name, value in captures.items():
        where = [i for i, owner in enumerate(owners) if owner == name]
        if not where:
            where = [i for i, named in enumerate(deep) if name in named]
        if not where:
            raise _unknown(fn, name, names or sorted(set[str]().union(*deep)))
        new = jtu.tree_leaves(value, is_leaf=_is_none)
        if len(new) == 1 and len(where) > 1:
            new = new * len(where)
        if len(new) != len(where):
            raise LiftError(
                f"lift.replace({fn}, {name}=...): the captured variable {name!r} "
                f"has {len(where)} leaves, the value {len(new)}.\nFix: give one "
                f"value for all of them, or a pytree like {name!r} "
                f"(`{type(lifted).__name__}.captures[{name!r}]`).",
                anchor="replace-unknown-name",
            )
        for i, leaf in zip(where, new, strict=True):
            leaves[i] = leaf
    return jtu.unflatten(treedef, leaves)


def _unknown(fn: str, name: str, names: list[str]) -> LiftError:
    near = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    known = ", ".join(repr(n) for n in names) or "none"
    return LiftError(
        f"lift.replace({fn}, {name}=...): the function has no captured variable "
        f"{name!r} holding a leaf{hint}.\nIts captured variables: {known} (static "
        "ones, part of the program, cannot be replaced).\nFix: name one of those; "
        "for a library's optimizer, whose variables are the library's "
        "(optax's `step_size` holds `-learning_rate`), lift the factory with "
        "your names: `lift.lift(functools.partial(optax.adam, "
        "learning_rate=0.1))`.",
        anchor="replace-unknown-name",
    )
