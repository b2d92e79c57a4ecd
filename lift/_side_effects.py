"""Side effects on captures (SPEC 1): code that mutates a captured list or dict
in place must reach the user's own object.

A list or dict with no dynamic leaf is kept as the user's object wherever it
sits; one that holds dynamic leaves is rebuilt around them, so code mutating it
(`lift._mutation` reads which) would change a copy: lift refuses it when it
lifts, naming the function, `file:line` and the path mutated."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Iterable
from typing import Any, Final, TypeAlias, cast

import numpy as np

from ._closure import function_parts
from ._compat import CUSTOM_NODES
from ._copies import REBUILT_TYPES
from ._errors import LiftError, describe, static_fix, type_text
from ._labels import ARG, ATTR, KEYWORD, SELF, Label
from ._mutating_flow import ANY, ATTR_STEP, ITEM_STEP, SETATTR_STEP, Path
from ._mutation import mutated_paths
from ._mutators import MUTATING
from ._nodes import Static, Template
from ._static import static_key
from ._trees import flatten_checked, is_function_like

# Containers the lifted function shares with the original when they hold no
# dynamic leaf (`own_static`): what code appends to, fills or counts in.
OWN_CONTAINERS: Final = (list, dict)

# A function whose cell holds a function or partial: it, the cell's variable,
# and the path from the variable's value to what it holds (`()`: the value
# itself; `((ITEM_STEP, 0),)` for `fns = [helper]`).
Capturer: TypeAlias = tuple[types.FunctionType, str, Path]


def refuse_mutation(
    fn: types.FunctionType,
    name: str | None,
    value: Any,
    template: Template,
    leaves: list[Any],
    prefix: Path = (),
) -> None:
    """A `LiftError` if `fn`'s code mutates a list or dict that lift rebuilds
    around its leaves (not the user's own object: see `own_static`), reached from the
    variable `name` (which holds `value`, captured as `template`) by a path the
    code reads (`state[0].append`, `d['log'][k] = v`); `prefix`: the part of
    the path that leads from `name` to `value` (a function attribute's)."""
    if name is None or not checked_for_mutation(value, template):
        return  # kept whole: the user's own object
    paths = mutated_paths(fn.__code__, fn.__globals__, attributes=True).get(name)
    if not paths:
        return
    kept = {id(s.value) for s in template.slots if type(s) is Static}
    nodes: set[int] = set()
    rebuilt = _rebuilt(value, kept, nodes)
    # NumPy arrays lift makes leaves: under a transform each is a tracer,
    # which cannot be written in place.
    flat = flatten_checked(value, is_function_like)
    leaf_ids: list[int] = [
        id(cast(object, x))
        for x in (flat[0] if flat is not None else ())
        if issubclass(type(cast(object, x)), np.ndarray)
    ]
    arrays = set(leaf_ids) - kept
    rebuilt |= arrays
    for path in paths:
        if not _leads_through(path, prefix):
            continue
        if path and path[-1][0] == SETATTR_STEP:
            _refuse_attribute_store(fn, name, value, path, prefix, kept, nodes)
            continue
        target = _target(value, path[len(prefix) :], kept, rebuilt)
        if target is None:
            continue
        what = type(target).__name__
        at = "" if not path else f" (at `{name}{_path_text(path)}`)"
        if id(target) in arrays:
            raise LiftError(
                f"{describe(fn)} mutates the captured variable {name!r} in "
                f"place{at}, a NumPy array ({type_text(target)}) that "
                "lift makes a leaf: under a transform it is a tracer, which "
                "cannot be written in place, and your array would not see the "
                f"change.\nFix: pass {name!r} as an argument and return the new "
                "value (`x.at[i].set(v)` on a JAX array).",
                anchor="mutates-a-rebuilt-container",
            )
        held = _what_in(target, template, leaves)
        plain = type(target) in OWN_CONTAINERS
        keep = (
            f"keep only static values in it, outside pytree nodes (a {what} "
            "without arrays, floats or functions, in a capture or in lists, "
            "tuples and dicts, is your own object inside the lifted function)"
            if plain
            else "use a plain dict holding only static values, outside pytree "
            "nodes (your own object inside the lifted function)"
        )
        raise LiftError(
            f"{describe(fn)} mutates the captured variable {name!r} in place{at}, "
            f"a {what} that {held}. lift rebuilds such a {what} around its "
            f"leaves, so the change would reach a copy, not your {what}.\nFix: "
            f"pass {name!r} as an argument and return what the code adds to it, "
            f"or {keep}.",
            anchor="mutates-a-rebuilt-container",
        )


def _refuse_attribute_store(
    fn: types.FunctionType,
    name: str,
    value: Any,
    path: Path,
    prefix: Path,
    kept: set[int],
    nodes: set[int],
) -> None:
    """A `LiftError` if `path` (ending in an attribute store) reaches a pytree
    node JAX rebuilds (`nodes`): `m.calls += 1` on a registered dataclass
    would set the attribute of the copy lift makes (its static fields are
    part of the structure lift rebuilds it from)."""
    target = _target(value, path[len(prefix) : -1], kept, nodes)
    if target is None:
        return
    what = type(target).__name__
    attribute = path[-1][1]
    store = (
        f"`{name}{_path_text(path)} = …`"
        if attribute
        else f"`setattr({name}{_path_text(path[:-1])}, …)`"
    )
    raise LiftError(
        f"{describe(fn)} sets an attribute of the captured variable {name!r} "
        f"in place ({store}), a {what} that JAX flattens as a pytree node. "
        f"lift rebuilds such a {what} around its leaves (its static fields "
        f"too), so the change would reach a copy, not your {what}.\nFix: pass "
        f"{name!r} as an argument and return the new value (`dataclasses."
        "replace`), or keep what the code counts outside the pytree node (a "
        "list without arrays, or an object that is not a pytree).",
        anchor="mutates-a-rebuilt-container",
    )


def checked_for_mutation(value: Any, template: Template) -> bool:
    """Whether code mutating what `template` captures could miss the user's
    object: a pytree rebuilt around leaves, or a NumPy array made a leaf."""
    return template.treedef is not None or (
        issubclass(type(cast(object, value)), np.ndarray)
        and any(type(s) is int for s in template.slots)
    )


def _rebuilt(value: Any, kept: set[int], nodes: set[int] | None = None) -> set[int]:
    """The lists and dicts in `value` that JAX's flattening rebuilds (it visits
    them as nodes: not those kept whole, nor a pytree's static data), by id;
    in `nodes`, the registered pytree nodes it rebuilds."""
    visited: set[int] = set()

    def is_leaf(x: Any) -> bool:
        if id(x) in kept or is_function_like(x):
            return True
        t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
        if t in REBUILT_TYPES:
            visited.add(id(cast(object, x)))
        elif nodes is not None and t in CUSTOM_NODES:
            nodes.add(id(cast(object, x)))
        return False

    flatten_checked(value, is_leaf)
    return visited


def _leads_through(path: Path, prefix: Path) -> bool:
    """Whether `path` starts with `prefix`, a key the code computes (`ANY`)
    matching any item's (`args[i]` reaches a partial's argument at `args[0]`)."""
    if len(path) < len(prefix):
        return False
    return all(
        a == b or (a == ANY and b[0] != ATTR_STEP)
        for a, b in zip(path, prefix, strict=False)
    )


def _target(value: Any, path: Path, kept: set[int], rebuilt: set[int]) -> Any:
    """A list or dict that `path` reaches in `value` and that lift rebuilds
    (`rebuilt`), or `None`. A key the code computes (`ANY`) reaches every
    item; what cannot be read (another branch of the code) reaches nothing."""
    current = [value]
    for step in path:
        following: list[Any] = []
        for x in current:
            if id(x) in kept:
                continue  # the user's own object, and all it holds
            try:
                if step == ANY:
                    if isinstance(x, dict):
                        following.extend(cast("dict[Any, Any]", x).values())
                    elif isinstance(x, (list, tuple)):
                        following.extend(cast("list[Any]", x))
                elif step[0] == ATTR_STEP:
                    following.append(getattr(x, step[1]))
                elif not isinstance(x, dict) or step[1] in x:
                    # (A dict's by a key it holds: never a defaultdict's
                    # `__missing__`, which would add the key.)
                    following.append(x[step[1]])
            except Exception:  # not there: nothing
                continue
        current = following
    for x in current:
        if id(x) in rebuilt:
            return x
    return None


def _what_in(target: Any, template: Template, leaves: list[Any]) -> str:
    """What a rebuilt container holds, for a message."""
    held = {id(leaves[s]): leaves[s] for s in template.slots if type(s) is int}
    flat = flatten_checked(target, is_function_like)
    for leaf in flat[0] if flat is not None else ():
        if id(leaf) in held:
            return f"holds a dynamic value ({type_text(leaf)})"
    if flat is not None and any(map(is_function_like, flat[0])):
        return "holds a function"
    if type(target) not in OWN_CONTAINERS:  # (`OrderedDict`, `defaultdict`)
        return "JAX flattens as a pytree node"
    return "sits in a pytree node"


def _path_text(path: Path) -> str:
    return "".join(
        "[…]"
        if step == ANY
        else f".{step[1]}"
        if step[0] == ATTR_STEP or (step[0] == SETATTR_STEP and step[1])
        else f"[{step[1]!r}]"
        for step in path
    )


def _parameter(fn: Any, label: Label) -> tuple[types.FunctionType, str, Path] | None:
    """The function and parameter a partial's argument or a bound method's
    object is passed to, when that function is a plain one, and the path from
    that parameter to the value (`args[k]` for `*args`, `kw[name]` for
    `**kw`)."""
    offset = 0
    func = fn
    if type(func) is types.MethodType:
        func, offset = func.__func__, 1
    if type(func) is not types.FunctionType:
        return None
    code = func.__code__
    if label.kind == SELF or label.kind == ARG:
        i = (0 if label.kind == SELF else cast(int, label.key)) + offset
        if i < code.co_argcount:
            return func, code.co_varnames[i], ()
        if code.co_flags & inspect.CO_VARARGS:  # `def g(*args)`: `args[k]`
            rest = code.co_varnames[code.co_argcount + code.co_kwonlyargcount]
            return func, rest, ((ITEM_STEP, i - code.co_argcount),)
        return None
    if label.kind == KEYWORD:
        key = cast(str, label.key)
        named = code.co_varnames[code.co_posonlyargcount : code.co_argcount]
        kwonly = code.co_varnames[
            code.co_argcount : code.co_argcount + code.co_kwonlyargcount
        ]
        if key in named or key in kwonly or not code.co_flags & inspect.CO_VARKEYWORDS:
            return func, key, ()
        # `def g(x, **kw)`: `kw[key]`.
        at = code.co_argcount + code.co_kwonlyargcount
        at += bool(code.co_flags & inspect.CO_VARARGS)
        return func, code.co_varnames[at], ((ITEM_STEP, key),)
    return None


def refuse_part_mutations(
    func: Any,
    parts: tuple[tuple[Label, Template], ...],
    obj_parts: list[Any],
    leaves: list[Any],
    capturers: Iterable[Capturer] = (),
) -> None:
    """`refuse_mutation` for the arguments a partial binds and the object a
    method is bound to, by the parameters of the function they are passed to;
    `capturers`: the functions whose cells hold the partial, and their
    variables (named by a refusal of a partial of a mutator)."""
    for (label, template), value in zip(parts, obj_parts, strict=True):
        if template.treedef is None or label.kind not in (SELF, ARG, KEYWORD):
            continue
        if id(func) in MUTATING and label.kind == ARG and label.key == 0:
            _refuse_mutator_partial(func, value, template, leaves, capturers)
            continue
        found = _parameter(func, label)
        if found is not None:
            refuse_mutation(found[0], found[1], value, template, leaves, found[2])


def _refuse_mutator_partial(
    func: Any,
    value: Any,
    template: Template,
    leaves: list[Any],
    capturers: Iterable[Capturer] = (),
) -> None:
    """A `LiftError` if a partial of a function or builtin method that mutates
    its first argument (`partial(list.append, buf)`) binds there a list or dict
    lift rebuilds: calling it would change the copy. Refused when it is lifted,
    called or not (its only use is mutating), naming the first function
    whose cell holds it (`capturers`), if any."""
    kept = {id(s.value) for s in template.slots if type(s) is Static}
    if id(value) in kept or id(value) not in _rebuilt(value, kept):
        return
    what = type(value).__name__
    name = getattr(func, "__qualname__", None) or repr(func)
    by = next(iter(capturers), None)
    who = (
        ""
        if by is None
        else f"{describe(by[0])} captures the variable {by[1]!r}, in which "
    )
    raise LiftError(
        f"{who}functools.partial({name}, …) mutates its first argument in place, a "
        f"{what} that {_what_in(value, template, leaves)}. lift rebuilds such a "
        f"{what} around its leaves, so the change would reach a copy, not your "
        f"{what}.\nFix: call {name} on a {what} passed as an argument, or keep "
        "only static values in it.",
        anchor="mutates-a-rebuilt-container",
    )


def own_static(value: Any) -> Static:
    """A list, dict or set kept as the user's very object: compared by its
    contents as they are now (type and value at every depth, dict order
    included), never replaced by an equal one (`exact=False`: a skeleton
    holding it is not shared, and the replay takes only that object)."""
    try:
        key = _contents_key(value)
        hash(key)
    except Exception:  # an unhashable static inside: by identity
        return Static(value)
    return Static(value, key, exact=False)


def nests_plainly(value: Any) -> bool:
    """Whether `value` nests only lists, tuples and dicts, not pytree nodes of
    other kinds (whose static data JAX's treedef compares in its own way)."""
    stack = [value]
    while stack:
        x = stack.pop()
        t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
        if t is list or t is tuple:
            stack.extend(x)
        elif t is dict:
            stack.extend(x.values())
        elif x is not None and (
            t in CUSTOM_NODES or hasattr(cast(Any, t), "_fields")  # a NamedTuple
        ):
            return False
    return True


def own_changed(statics: Iterable[Static]) -> bool:
    """Whether one of `statics` is a list, dict or set kept as your own object
    (`own_static`) whose contents are no longer those it was keyed by."""
    for static in statics:
        value = static.value
        if type(value) in (list, dict, set) and not static.by_identity:  # pyright: ignore[reportUnknownArgumentType]
            try:
                if _contents_key(value) != static.slot_key:
                    return True
            except Exception:  # now holds an unhashable value: changed
                return True
    return False


def _contents_key(value: Any) -> Any:
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if t is list:
        return (t, tuple(map(_contents_key, value)))
    if t is dict:
        return (t, tuple((static_key(k), _contents_key(v)) for k, v in value.items()))
    if t is set:
        return (t, frozenset(map(static_key, value)))
    return static_key(value)


def captured_functions(
    fn: types.FunctionType, name: str, value: Any, template: Template
) -> list[tuple[Any, Path]]:
    """The functions and partials that `fn`'s variable `name` holds (`value`,
    captured as `template`), each with the path to it: `value` itself, or
    those in a container `value` is, when `fn`'s code mutates through the
    container (`fns[0].log.append(v)`)."""
    if _function_or_partial(value):
        return [(value, ())]
    if template.treedef is None or not mutated_paths(fn.__code__, fn.__globals__).get(
        name
    ):
        return []
    found: list[tuple[Any, Path]] = []
    todo: list[tuple[Any, Path]] = [(value, ())]
    seen: set[int] = set()
    while todo:  # the lists, tuples and dicts a code's path steps through
        x, path = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
        if _function_or_partial(x):
            found.append((x, path))
        elif t is list or t is tuple:
            items = cast("list[Any]", x)
            todo.extend((v, (*path, (ITEM_STEP, k))) for k, v in enumerate(items))
        elif t is dict:
            items = cast("dict[Any, Any]", x).items()
            todo.extend((v, (*path, (ITEM_STEP, k))) for k, v in items)
    return found


def _function_or_partial(x: Any) -> bool:
    """By type: an object's `__class__` may be hostile."""
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    return t is types.FunctionType or issubclass(t, functools.partial)


def refuse_attribute_mutations(
    fn: types.FunctionType,
    parts: tuple[tuple[Label, Template], ...],
    capturers: list[Capturer],
    leaves: list[Any],
) -> None:
    """`refuse_mutation` for the functions whose cells hold `fn` (`capturers`:
    each with its variable and the path to `fn` in it), through `fn`'s
    attributes (`parts`, as captured): `helper.log.append(v)` in `step`,
    `helper` captured (`fns[0].log.append(v)`, `fns = [helper]`)."""
    values = dict(function_parts(fn))
    for owner, name, prefix in capturers:
        for label, template in parts:
            if label.kind != ATTR or label not in values:
                continue
            value = values[label]
            if checked_for_mutation(value, template):
                refuse_mutation(
                    owner,
                    name,
                    value,
                    template,
                    leaves,
                    (*prefix, (ATTR_STEP, label.key)),
                )


def refuse_rebinding(
    fn: types.FunctionType, name: str, template: Template, leaves: list[Any]
) -> None:
    """A `LiftError` if the variable `name`, which `fn`'s code rebinds
    (`nonlocal name; name = ...`), holds a dynamic leaf or a function
    (`template`): its new value would not reach the lifted function's leaves."""
    if all(type(s) is Static for s in template.slots):
        return
    what = next(
        (
            f"a dynamic value ({type_text(leaves[s])})"
            for s in template.slots
            if type(s) is int
        ),
        "a function",
    )
    raise LiftError(
        f"{describe(fn)} rebinds the captured variable {name!r} "
        f"(`nonlocal {name}; {name} = ...`), which holds {what}. A lifted "
        "function's dynamic captures are pytree leaves and cannot be "
        "reassigned from inside it.\n"
        f"Fix: pass {name!r} as an argument and return its new value, or keep it "
        f"static with {static_fix((name,))} if it is not an array.",
        anchor="rebinds-a-dynamic-capture",
        static=(name,),
    )
