"""The errors lift raises about a function's captures.

A concretization error, such as a Python branch on a traced capture, is
explained by its capture. What `lift` cannot take is said with the fix."""

from __future__ import annotations

import dis
import traceback
import types
from typing import Any, Final, cast

import jax

from .._base.atoms import UNOPENED
from .._base.errors import LiftError, describe, docs_anchor, static_fix, type_text
from .._base.owners import is_user_module
from .._base.routes import factory_route, rate_route
from .._compat import (
    Tracer,
    concretized_arguments,
    eager,
    number_method,
    tracer_use,
)
from .._holders.reach import reach
from .._holders.trees import (
    flatten_checked,
    is_function_like,
    one_level,
    tree_structure,
    treedef_is_leaf,
)
from .._leaks.scan import NONE_LIVE, LeakWalk
from .._rule.code import code_info
from .._rule.flow import DEREF_LOADS, FAST_LOADS
from .._rule.static import DynamicNames
from .._skeleton.nodes import FunctionNode
from .._skeleton.paths import leaf_paths
from .._skeleton.skeleton import LiftedParts, Skeleton, arrays_of, skeleton_of


def explain_concretization(x: LiftedParts, err: BaseException) -> LiftError | None:
    """Name the capture, and its function, when a traced leaf was needed
    concrete.

    `None` when the value came from no capture: an argument traced by `vmap`
    or `jit`. The search starts at the innermost frame of the graph's code.
    It reads the instruction the error stopped at. It finds the
    variables its operands came from (`CodeInfo.operands`). Each is matched by
    identity against the `Lifted`'s leaves. A hash reads the subscript's key
    alone. Where the bytecode cannot tell, it reads the frame's captured
    tracers. Then it reads the argument JAX's message names.
    """
    leaves = arrays_of(x)
    kind = tracer_use(err)
    # Hashing fails for an array as for a tracer (eagerly, or under `grad`
    # with the capture not traced): then the arrays count too.
    held = jax.Array if kind in ("hash", "method") else Tracer
    if not eager() and not any(isinstance(v, held) for v in leaves):
        # A `Lifted` made and flattened outside the trace it is called in (one
        # that a jitted function or a scan body closes over): its leaves are
        # concrete arrays, which the trace's first operation on them
        # (`min(lr, 1.0)`'s comparison) makes traced values.
        held = jax.Array
    tracers = {id(v): i for i, v in enumerate(leaves) if isinstance(v, held)}
    if not tracers:
        return None
    skeleton = skeleton_of(x)
    codes = {n.info.code for n in skeleton.nodes if isinstance(n, FunctionNode)}
    owners = skeleton.leaf_owner()
    # The innermost frame of the graph's code, or of the user's code it called
    # (a method of a captured pytree, `if self.lr > 0.5`).
    last: types.TracebackType | None = None
    tb = err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code in codes or (
            last is not None and is_user_module(tb.tb_frame.f_globals.get("__name__"))
        ):
            last = tb
        tb = tb.tb_next
    if last is None:
        return None
    code, local = last.tb_frame.f_code, last.tb_frame.f_locals
    sources = code_info(code).operands(last.tb_lasti)
    if kind == "hash":  # `{0.1: y}[lr]` hashes `lr` alone, not what the dict holds
        key = _subscript_key(code, last.tb_lasti)
        sources = frozenset(s for s in sources if s[1] == key) or sources
    found = [
        (name, i)
        for _, name in sorted(sources)
        if name in local
        for i in _leaves_in(local[name], tracers)
    ]
    # Of those, the ones JAX was converting, where its frames show them; and
    # a leaf itself before a container holding one (`d[k]` hashes `k`).
    converted = [(n, i) for n, i in found if id(leaves[i]) in _converted(last)]
    found = converted or found
    found.sort(key=lambda pair: id(local[pair[0]]) not in tracers)
    if sources and (
        not found or any(_foreign(local.get(n), tracers, held) for _, n in sources)
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
    aval = type_text(leaves[index])
    if isinstance(err, jax.errors.TracerBoolConversionError):
        use = "in Python control flow (`if`, `while`, `and`, `bool()`, ...)"
        other = "replace the Python branch with `jnp.where` / `jax.lax.cond`"
    elif isinstance(err, jax.errors.TracerIntegerConversionError):
        use = "as a Python int (`int()`, an index, a `range`, a shape)"
        other = "compute with it as an array"
    elif kind == "format":
        use = "in a format spec (`f'{x:.3g}'`, `format()`)"
        other = "print it with `jax.debug.print` (its value at run time)"
    elif kind == "hash":
        use = "as a hashed Python value (a dict key, a set member, a cache key)"
        other = "look it up with `jnp.where` or `jax.lax.switch`"
    elif kind == "method":
        method = number_method(cast("AttributeError", err))
        use = f"as a Python number (`.{method}()`, which arrays do not have)"
        other = "compute it with `jnp` (`x == jnp.round(x)` for `.is_integer()`)"
    else:
        use = (
            "where a concrete value is needed (a shape, a size, `float()`, "
            "`.item()`, NumPy)"
        )
        other = "compute with it as an array"
    if kind == "method":
        made = f"an array ({aval})"
    elif isinstance(leaves[index], Tracer):
        made = f"a traced value ({aval}), so its value is unknown while tracing"
    elif kind != "hash":
        made = (
            f"an array ({aval}), which the trace it is used in computes with as "
            "a traced value, so its value is unknown while tracing"
        )
    else:
        made = f"a JAX array ({aval}), which Python cannot hash"
    if not any(n in skeleton.names for n in names):
        # The object of a lifted bound method (`lift(cfg.scaled)`): no name
        # `static=` takes.
        return LiftError(
            f"{where} uses {name!r}, the object a lifted bound method is bound "
            f"to, {use}, but lift made its leaf {made}.\nFix: {other}, or lift "
            f"a function that captures the object instead and keep it static, "
            f"`lift(lambda *a: obj.method(*a), static=('obj',))`.",
            anchor="control-flow-on-a-capture",
        )
    options = skeleton.options
    named = options[1] if options is not None else None
    built = factory_route(x, code, name)
    if isinstance(named, DynamicNames) and named.names & set(names):
        # You named it in `dynamic=`: `static=` too would be refused.
        keep = (
            f"keep it static by leaving {name!r} out of `dynamic=` (each new value "
            "then compiles anew)"
        )
        if built is not None:
            # A library's factory checks its argument when it builds: lift
            # what it built, whose functions keep the value under its name.
            return LiftError(
                f"{where} uses the captured variable {name!r} {use}, but lift "
                f"made it {made}: the factory checks it while it builds.\nFix: "
                f"lift what the factory builds instead, naming the variable its "
                f"functions keep: `lift.lift({built}, dynamic={name!r})`; or "
                f"{keep}.",
                anchor="control-flow-on-a-capture",
                static=names,
            )
    else:
        keep = (
            f"keep it static, {static_fix(names)} (each new value then compiles anew)"
        )
    return LiftError(
        f"{where} uses the captured variable {name!r} {use}, but lift made it "
        f"{made}.\nFix: {keep}, or {other}.",
        anchor="control-flow-on-a-capture",
        static=names,
    )


def _leaves_in(value: Any, tracers: dict[int, int]) -> list[int]:
    """The indices of the `Lifted`'s traced leaves that `value` is or holds.

    The leak scan's walk reaches them, `_LOOK` objects at most. They are its
    pytree leaves, and what the functions among them capture."""
    index = tracers.get(id(value))
    if index is not None:
        return [index]
    walk = LeakWalk(_LOOK, only=frozenset(tracers), live=NONE_LIVE, globals=False)
    walk.push(value, -1, "")
    walk.run()
    if walk.tracers:
        return [tracers[id(t)] for t in walk.tracers]
    # Concrete array leaves (`explain_concretization`'s fallback), which the
    # walk, looking for tracers, passes by: a container's (`max(lrs)`).
    flat = flatten_checked(value, is_function_like)
    return [] if flat is None else [tracers[id(v)] for v in flat[0] if id(v) in tracers]


# Objects `_leaves_in` looks at, at most.
_LOOK: Final = 10_000


def _converted(tb: types.TracebackType) -> set[int]:
    """The ids of the tracers held by the frames below `tb`.

    Those are JAX's frames, where it converts a value. It looks one container
    deep."""
    out: set[int] = set()
    for frame, _ in traceback.walk_tb(tb.tb_next):
        for v in frame.f_locals.values():
            held = cast("tuple[Any, ...]", v) if type(v) is tuple else (v,)
            out.update(id(w) for w in held if isinstance(w, Tracer))
    return out


def _subscript_key(code: types.CodeType, offset: int) -> str | None:
    """The variable a subscript at `offset` looks up (`table[lr]`).

    It is found when the subscript loads it just before."""
    before = None
    for ins in dis.get_instructions(code):
        if ins.offset == offset:
            subscript = ins.opname == "BINARY_SUBSCR" or ins.argrepr == "[]"
            return before if subscript else None
        before = ins.argval if ins.opname in FAST_LOADS | DEREF_LOADS else None
    return None


def _foreign(value: Any, tracers: dict[int, int], held: type[Any] = Tracer) -> bool:
    """Whether `value` is a tracer that is no leaf of the `Lifted`.

    Such a tracer is an argument. With `held` an array type, arrays count."""
    return isinstance(value, held) and id(value) not in tracers


def _guessed(
    err: BaseException,
    skeleton: Skeleton,
    local: dict[str, Any],
    tracers: dict[int, int],
) -> list[tuple[str, int]]:
    """The captured tracers to blame where the bytecode cannot tell.

    JAX's message may name the argument the value depended on. Its key path
    ends in a leaf's (`g.captures['v']`). Else all the frame's captured tracers
    are blamed."""
    here = [(n, i) for n, v in local.items() for i in _leaves_in(v, tracers)]
    blamed = concretized_arguments(str(err))
    if blamed is None:
        return here
    paths = [str(p) for p in leaf_paths(skeleton)]
    ours = [i for b in blamed for i in range(len(paths)) if b.endswith(paths[i])]
    if not ours:
        return []  # a traced argument of the function, not a capture
    return [(n, i) for n, i in here if i in ours] or [("", ours[0])]


def no_function(cls: type[Any], options: dict[str, Any], *, base: bool) -> LiftError:
    """The error for a `Lifted` class called with options only.

    That is `Sub(dynamic="a")`. `base` is for `Lifted` itself."""
    name = "lift.Lifted" if base else cls.__name__
    given = ", ".join(f"{k}={v!r}" for k, v in options.items()) or "..."
    decorator = f"lift.lift({given})" if base else f"functools.partial({name}, {given})"
    return LiftError(
        f"{name}() got no function: it takes the function first.\n"
        f"Fix: `{name}(fn, {given})`; as a decorator with options, `@{decorator}`.",
        anchor="lifted-without-a-function",
    )


def reject(obj: Any, name: str) -> LiftError:
    """The error for something `name(...)` (`lift` or a `Lifted` subclass) cannot take.

    It reads the object through its type only. A proxy's attributes may fail.
    """
    t: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
    try:
        shown = f"{obj!r:.60}"
    except Exception:
        shown = f"<{t.__name__} object>"
    package = str(getattr(t, "__module__", "")).partition(".")[0]

    def wrapped() -> tuple[str, str]:
        # The function a JAX wrapper or a staticmethod holds (`__wrapped__`):
        # its name for a fix to paste (`f` if it has none), and where it is
        # defined; as shown when it has none.
        try:
            inner = getattr(obj, "__wrapped__", obj)
            fn, where = inner.__name__, describe(inner)
        except Exception:
            return "f", shown
        return (fn if isinstance(fn, str) and fn.isidentifier() else "f"), where

    if issubclass(t, (staticmethod, classmethod)):
        # `@lift.lift` written above `@staticmethod` in a class body: the
        # decorator below made a descriptor, which lift receives instead of
        # the function (a staticmethod is even callable since Python 3.10).
        anchor = "lift-above-staticmethod"
        kind = "staticmethod" if issubclass(t, staticmethod) else "classmethod"
        fn, where = wrapped()
        deco = "lift.lift" if name == "lift" else name
        args = "x" if kind == "staticmethod" else "cls, x"
        below = deco
        if deco == "lift.jit" and kind == "classmethod":
            below = 'lift.jit(static_argnames="cls")'  # a class is no array
        what = (
            f"a {kind} ({where}): the decorators are in the wrong order. "
            f"`@{deco}` above `@{kind}` receives the {kind} object, not the "
            f"function.\nFix: put `@{kind}` on top, so that lift receives the "
            f"function:\n\n    @{kind}\n    @{below}\n    def {fn}({args}): ..."
        )
    elif issubclass(t, type):
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
    elif held := _held_functions(obj):
        anchor = "lift-got-an-object-holding-functions"
        what = _holding_functions(t, shown, held, rate_route(obj, held))
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


def _held_functions(obj: Any) -> list[tuple[str, Any]]:
    """The attributes of `obj` holding functions (`obj.init_fn`).

    `obj` is not a pytree. It looks one level down (`obj.optim.update_fn`). It
    names `_SHOWN_ATTRIBUTES` at most. It reads `__dict__` alone, never
    `getattr`: a proxy's attributes may fail."""
    paths = {id(obj): "obj"}
    found: list[tuple[str, Any]] = []

    def into(x: Any) -> list[Any] | None:
        try:
            attributes = object.__getattribute__(x, "__dict__")
        except Exception:  # no `__dict__`, or one that fails: nothing to show
            return None
        if type(attributes) is not dict or len(found) >= _SHOWN_ATTRIBUTES:
            return None
        deeper: list[Any] = []
        for name, value in cast("dict[Any, Any]", attributes).items():
            if isinstance(name, str) and id(value) not in paths:
                paths[id(value)] = where = f"{paths[id(x)]}.{name}"
                if is_function_like(value) or _pytree_of_functions(value):
                    found.append((where, value))
                elif x is obj and not _is_plain(value):
                    deeper.append(value)
        return deeper[::-1]  # the walk takes items last first

    for _ in reach([obj], into):
        pass
    return found[:_SHOWN_ATTRIBUTES]


_SHOWN_ATTRIBUTES = 6


def _is_plain(value: Any) -> bool:
    """Values whose attributes hold no function of the user's.

    They are scalars, classes, modules and pytrees. A pytree is told by its
    top node alone: JAX's flattening of a dict holding itself raises from deep
    inside, and leaves the interpreter's recursion depth counted up."""
    t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
    if t in UNOPENED or issubclass(t, type):
        return True
    try:
        return not treedef_is_leaf(tree_structure(value, is_leaf=one_level(value)))
    except Exception:  # a node whose flatten fails: not looked into
        return True


def _pytree_of_functions(value: Any) -> bool:
    """Whether `value`, itself no function, holds one among its pytree leaves."""
    if type(value) in UNOPENED:
        return False
    try:
        flat = flatten_checked(value, is_function_like)
    except (TypeError, ValueError):  # a node whose flatten fails: not looked into
        return False
    return flat is not None and any(map(is_function_like, flat[0]))


def _holding_functions(
    t: type[Any], shown: str, held: list[tuple[str, Any]], build: str
) -> str:
    """The message for an object that is not a pytree but keeps functions."""
    names = ", ".join(path for path, _ in held)
    return (
        f"{t.__qualname__} {shown}, an object that is not a pytree but holds "
        f"functions in its attributes: {names}. lift takes functions and pytrees "
        f"apart; it cannot rebuild an object of a class it does not know, so "
        f"what those functions captured (a learning rate, say) cannot become "
        f"leaves.\n"
        f"Fix: build the object where the value is traced. Either inside a "
        f"function that captures the float, compiled with `lift.jit` (one "
        f"program for every value):\n"
        f"    def make_step(lr):\n"
        f"        @lift.jit\n"
        f"        def step(state, batch):\n"
        f"            obj = {build}\n"
        f"            ...  # use obj\n"
        f"        return step\n"
        f"or pass the float as an argument of your own jitted step:\n"
        f"    @jax.jit\n"
        f"    def step(lr, state, batch):\n"
        f"        obj = {build}\n"
        f"        ...  # use obj"
    )


def static_argument(x: Any) -> str:
    """The warning when `jax.jit` compiles for a static `Lifted` argument."""
    cls = type(x).__name__
    return (
        f"a {cls} ({x.__qualname__}) was given to jax.jit as a static argument "
        "(static_argnums or static_argnames), or inside one: a static argument is "
        f"compared by identity for a {cls}, so each new one compiles a program "
        f"of its own.\nFix: pass it as a regular (traced) argument: a {cls} is a "
        "pytree whose code and static captures jax.jit compiles once, and whose "
        "arrays it traces." + docs_anchor("lifted-static-argument")
    )
