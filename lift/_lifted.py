# pyright: reportPrivateUsage=false
"""`Lifted`: a Python function as a JAX pytree, and `lift`, which makes them."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterable
from typing import Any, Final, Generic, Self, TypeVar, cast, overload

import jax
from typing_extensions import ParamSpec

from . import _registry, _trees as jtu
from ._capture import capture, is_function_like
from ._compat import Tracer
from ._errors import LiftError, describe
from ._skeleton import (
    CellNode,
    FunctionNode,
    MethodNode,
    PartialNode,
    Ref,
    Skeleton,
    Static,
    Template,
    build,
    is_cyclic,
)

__all__ = ["Lifted", "is_lifted", "lift", "unlift"]

_P = ParamSpec("_P")
_R = TypeVar("_R", covariant=True)
_T = TypeVar("_T")

_Tracer: Final = Tracer


# -- Python scalars as weakly typed arrays ---------------------------------------

_scalar_arrays: dict[tuple[Any, ...], jax.Array] = {}
_SCALAR_CACHE_SIZE: Final = 4096


def _as_array(x: Any) -> Any:
    """A weakly typed 0-d array for a Python scalar, made once per value.

    `jax.jit` converts Python-scalar arguments on every call; converting once
    keeps a cached call as cheap as one taking arrays. The cache is keyed by type
    and value (so `1.0` and `True` never mix) and bounded.
    """
    key: tuple[Any, ...] = (type(x), x)  # pyright: ignore[reportUnknownVariableType]
    if x == 0:  # `0.0 == -0.0`: keep them apart
        key = (type(x), repr(x))  # pyright: ignore[reportUnknownVariableType]
    hit = _scalar_arrays.get(key)
    if hit is not None:
        return hit
    # Concrete even when a trace is active: these arrays outlive any trace.
    with jax.ensure_compile_time_eval():
        arr: jax.Array = jax.device_put(x)  # pyright: ignore[reportUnknownMemberType]
    if len(_scalar_arrays) >= _SCALAR_CACHE_SIZE:
        _scalar_arrays.clear()
    _scalar_arrays[key] = arr
    return arr


def _flat_leaves(leaves: tuple[Any, ...], scalars: frozenset[int]) -> tuple[Any, ...]:
    if not scalars:
        return leaves
    out = list(leaves)
    for i in scalars:
        if type(out[i]) in (float, complex, int):
            out[i] = _as_array(out[i])
    return tuple(out)


# -- the pytree ------------------------------------------------------------------


class Lifted(Generic[_P, _R]):
    """A Python function as a JAX pytree: its code is static, its captures are leaves.

    Build one with [`lift.lift`][] (or `Lifted(fn)`, or a subclass `Sub(fn)`). The
    closure cells, defaults, `functools.partial` arguments and bound `self` of the
    function, and of every function they hold, are walked as pytrees: arrays,
    tracers, NumPy values and Python `float`/`complex` become leaves; everything
    else is static and part of the treedef. Two `Lifted` with the same code and
    equal static captures have equal treedefs, so `jax.jit` reuses its compiled
    program for them.

    Calling a `Lifted` calls the function, rebuilt once with fresh cells that hold
    the current leaves. The function it was made from is never modified.

    Subclass it to add interface methods; a subclass is a pytree without further
    registration, and transforms return instances of the subclass:

    ```python
    import jax
    import jax.numpy as jnp
    import lift

    class Density(lift.Lifted):
        def log_prob(self, x):
            return self(x)

    def make(mu):
        @Density
        def logp(x):
            return -0.5 * (x - mu) ** 2
        return logp

    d = jax.jit(lambda d: d)(make(jnp.asarray(1.0)))
    assert isinstance(d, Density)
    assert d.log_prob(1.0) == 0.0
    ```

    **Arguments:**

    - `fn`: a function, bound method, `functools.partial`, or `Lifted`.
    - `static`: names of captured variables (free variables, default parameters
      or partial keywords, at any depth) to keep static whatever their type.
    - `dynamic`: a predicate replacing the default rule for what is a leaf.
    """

    __slots__ = (
        "__dict__",
        "__weakref__",
        "_flat",
        "_fn",
        "_leaves",
        "_original",
        "_skeleton",
    )

    # Set per instance (the function's), as `functools.wraps` would.
    __name__: str
    __qualname__: str  # pyright: ignore[reportIncompatibleVariableOverride]
    _skeleton: Skeleton
    _leaves: tuple[Any, ...]
    _flat: tuple[Any, ...] | None
    _fn: Callable[_P, _R] | None
    _original: Any

    def __init__(
        self,
        fn: Callable[_P, _R],
        /,
        *,
        static: str | Iterable[str] = (),
        dynamic: Callable[[Any], bool] | None = None,
    ) -> None:
        names = frozenset((static,) if isinstance(static, str) else static)
        if isinstance(fn, Lifted) and not names and dynamic is None:
            other = cast("Lifted[_P, _R]", fn)
            skeleton, leaves, original = other._skeleton, other._leaves, other._original
        else:
            if isinstance(fn, Lifted):
                fn = cast("Callable[_P, _R]", unlift(fn))
            elif not is_function_like(fn):
                raise _reject(fn, type(self))
            skeleton, leaves = capture(fn, static=names, dynamic=dynamic)
            leaves = tuple(leaves)
            original = fn
        self._setup(skeleton, leaves, None)
        self._original = original
        _registry.record(self)

    def _setup(
        self, skeleton: Skeleton, leaves: tuple[Any, ...], flat: tuple[Any, ...] | None
    ) -> None:
        self._skeleton = skeleton
        self._leaves = leaves
        self._flat = flat
        self._fn = None
        self._original = None
        attrs = skeleton.cache.get("attrs")
        if attrs is None:
            root = _root_function(skeleton)
            attrs = skeleton.cache["attrs"] = {
                "__name__": _root_name(skeleton, "name"),
                "__qualname__": _root_name(skeleton, "qualname"),
                "__doc__": root.attrs.get("__doc__") if root is not None else None,
                "__module__": root.attrs.get("__module__")
                if root is not None
                else None,
            }
        # Instance attributes: the class already has its own `__doc__`, `__module__`.
        self.__dict__.update(attrs)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _register(cls)

    @classmethod
    def closure_convert(
        cls, fn: Callable[..., Any], /, *example_args: Any, **example_kwargs: Any
    ) -> Self:
        """Trace `fn` on example arguments and lift every tracer and array it closed over.

        For captures that `lift` cannot see as leaves (tracers inside objects that
        are not pytrees, behind attributes, in globals). Returns an instance of
        the class it is called on, so `Sub.closure_convert(fn, x)` is a `Sub`.

        **Arguments:**

        - `fn`: the function to convert.
        - `*example_args`, `**example_kwargs`: arguments of the shapes and dtypes
          the result will be called with.

        **Returns:** a `Lifted` (of this class) whose leaves are every closed-over
        tracer and array, of every dtype.
        """
        from ._convert import convert

        return convert(cls, fn, example_args, example_kwargs)

    # -- calling ------------------------------------------------------------------

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        fn = self._fn
        if fn is None:
            fn = self._fn = build(self._skeleton, self._leaves)
        try:
            return fn(*args, **kwargs)
        except jax.errors.ConcretizationTypeError as err:
            better = _explain_concretization(self, err)
            if better is None:
                raise
            raise better from err

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        # Behave like a function when stored on a class: bind `self`.
        if instance is None:
            return self
        return types.MethodType(self, instance)

    # -- introspection ---------------------------------------------------------

    @property
    def __wrapped__(self) -> Callable[_P, _R]:
        """The function this was lifted from (rebuilt from the leaves after a
        transform, which never carries the original)."""
        original = self._original
        if original is not None:
            return original
        fn = self._fn
        if fn is None:
            fn = self._fn = build(self._skeleton, self._leaves)
        return fn

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.__wrapped__)

    @property
    def captures(self) -> dict[str, Any]:
        """The root function's captured variables by name, with current leaves."""
        skeleton, leaves = self._skeleton, self._leaves
        objs = _built_nodes(skeleton, leaves)
        root = skeleton.nodes[0]
        out: dict[str, Any] = {}
        if isinstance(root, FunctionNode):
            for name, index in zip(root.info.freevars, root.cells, strict=True):
                cell = skeleton.nodes[index]
                assert isinstance(cell, CellNode)
                if cell.template is not None:
                    out[name] = cell.template.materialize(leaves, objs)
            for template in (
                *(root.defaults or ()),
                *(t for _, t in root.kwdefaults or ()),
            ):
                out[cast(str, template.name)] = template.materialize(leaves, objs)
        elif isinstance(root, PartialNode):
            out.update({k: t.materialize(leaves, objs) for k, t in root.keywords})
        return out

    def __repr__(self) -> str:
        return _pformat(self)


def _register(cls: type[Lifted[Any, Any]]) -> None:
    def flatten(x: Lifted[Any, Any]) -> tuple[tuple[Any, ...], Skeleton]:
        flat = x._flat
        if flat is None:
            flat = x._flat = _flat_leaves(x._leaves, x._skeleton.float_leaves)
        return flat, x._skeleton

    def flatten_with_keys(
        x: Lifted[Any, Any],
    ) -> tuple[tuple[tuple[Any, Any], ...], Skeleton]:
        flat, skeleton = flatten(x)
        return tuple(zip(skeleton.leaf_paths(), flat, strict=True)), skeleton

    def unflatten(skeleton: Skeleton, children: Iterable[Any]) -> Lifted[Any, Any]:
        self = object.__new__(cls)
        leaves = tuple(children)
        self._setup(skeleton, leaves, leaves)
        return self

    jtu.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)


_register(Lifted)


# -- helpers over skeletons --------------------------------------------------------


def _root_function(skeleton: Skeleton) -> FunctionNode | None:
    """The function at the root, seen through partials and bound methods."""
    node = skeleton.nodes[0]
    for _ in range(len(skeleton.nodes)):
        if isinstance(node, FunctionNode):
            return node
        if isinstance(node, (PartialNode, MethodNode)):
            slot = node.func.slots[0]
            if type(slot) is not Ref:
                return None
            node = skeleton.nodes[slot.index]
        else:
            return None
    return None


def _root_name(skeleton: Skeleton, which: str) -> str:
    root = _root_function(skeleton)
    if root is not None:
        return root.name if which == "name" else root.qualname
    node = skeleton.nodes[0]
    if isinstance(node, (PartialNode, MethodNode)):
        slot = node.func.slots[0]
        if isinstance(slot, Static):
            return getattr(
                slot.value, "__name__" if which == "name" else "__qualname__", "partial"
            )
    return "partial"


def _built_nodes(skeleton: Skeleton, leaves: tuple[Any, ...]) -> list[Any]:
    """Every node of a freshly built graph (index-aligned with `skeleton.nodes`)."""
    root = build(skeleton, leaves)
    objs: list[Any] = [None] * len(skeleton.nodes)
    objs[0] = root
    # Recover the other nodes by following the same references as the skeleton.
    for i, node in enumerate(skeleton.nodes):
        obj = objs[i]
        if obj is None:
            continue
        if isinstance(node, FunctionNode):
            for cell_index, cell in zip(node.cells, obj.__closure__ or (), strict=True):
                objs[cell_index] = cell
        _fill_refs(skeleton, node, obj, objs)
    return objs


def _fill_refs(skeleton: Skeleton, node: Any, obj: Any, objs: list[Any]) -> None:
    pairs: list[tuple[Template, Any]] = []
    if isinstance(node, CellNode):
        if node.template is not None:
            pairs.append((node.template, obj.cell_contents))
    elif isinstance(node, FunctionNode):
        pairs.extend(zip(node.defaults or (), obj.__defaults__ or (), strict=True))
        pairs.extend((t, obj.__kwdefaults__[k]) for k, t in node.kwdefaults or ())
    elif isinstance(node, PartialNode):
        pairs.append((node.func, obj.func))
        pairs.extend(zip(node.args, obj.args, strict=True))
        pairs.extend((t, obj.keywords[k]) for k, t in node.keywords)
    elif isinstance(node, MethodNode):
        pairs.extend(((node.func, obj.__func__), (node.self_, obj.__self__)))
    for template, value in pairs:
        values = (
            [value]
            if template.treedef is None
            else template.treedef.flatten_up_to(value)
        )
        for slot, v in zip(template.slots, values, strict=True):
            if type(slot) is Ref and objs[slot.index] is None:
                objs[slot.index] = v
    del skeleton


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


def _pformat(x: Lifted[Any, Any]) -> str:
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
    inner = ", ".join([_root_name(skeleton, "qualname"), *items])
    return f"{type(x).__name__}({inner})"


def _explain_concretization(
    x: Lifted[Any, Any], err: BaseException
) -> LiftError | None:
    """Name the capture when a traced leaf was used in Python control flow."""
    tracers = {
        id(leaf): i for i, leaf in enumerate(x._leaves) if isinstance(leaf, _Tracer)
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


def _reject(obj: Any, cls: type[Any]) -> LiftError:
    name = "lift" if cls is Lifted else cls.__name__
    if isinstance(obj, type):
        what = (
            f"the class {obj.__qualname__}. A class is not a function lift can take "
            f"apart.\nFix: lift a function or bound method, e.g. "
            f"`{name}(instance.method)`, or make the class a pytree (e.g. an "
            "equinox.Module)."
        )
    elif isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType)) or (
        callable(obj)
        and not hasattr(obj, "__code__")
        and type(obj).__module__ in ("builtins", "numpy")
    ):
        what = (
            f"the builtin {getattr(obj, '__qualname__', obj)!r}, which has no Python "
            f"closure to lift.\nFix: call it from a Python function and lift that: "
            f"`{name}(lambda *a: fn(*a))`."
        )
    elif callable(obj):
        what = (
            f"a callable {type(obj).__name__} object that is not a pytree, so "
            "its state cannot become leaves.\nFix: lift its method, "
            f"`{name}(obj.__call__)`, or make its class a pytree (e.g. an "
            "equinox.Module)."
        )
    else:
        what = (
            f"{type(obj).__qualname__} {obj!r:.60}, which is neither a function nor "
            "a pytree holding functions.\nFix: pass a function, bound method, "
            "functools.partial, or a pytree (tuple, dict, NamedTuple, ...) of them."
        )
    return LiftError(f"{name}() got {what}")


# -- the public functions -----------------------------------------------------------


@overload
def lift(
    obj: None = None,
    /,
    *,
    static: str | Iterable[str] = (),
    dynamic: Callable[[Any], bool] | None = None,
) -> Callable[[Callable[_P, _T]], Lifted[_P, _T]]: ...
@overload
def lift(
    obj: Lifted[_P, _T],
    /,
    *,
    static: str | Iterable[str] = (),
    dynamic: Callable[[Any], bool] | None = None,
) -> Lifted[_P, _T]: ...
@overload
def lift(
    obj: Callable[_P, _T],
    /,
    *,
    static: str | Iterable[str] = (),
    dynamic: Callable[[Any], bool] | None = None,
) -> Lifted[_P, _T]: ...
@overload
def lift(
    obj: _T,
    /,
    *,
    static: str | Iterable[str] = (),
    dynamic: Callable[[Any], bool] | None = None,
) -> _T: ...
def lift(
    obj: Any = None,
    /,
    *,
    static: str | Iterable[str] = (),
    dynamic: Callable[[Any], bool] | None = None,
) -> Any:
    """Make a function, or every function inside a pytree, into a [`lift.Lifted`][].

    Use it as `@lift`, `@lift(static=("n",))`, or `lift(obj)`.

    - A function (`def`, `lambda`, nested, recursive, generator, async), bound
      method or `functools.partial` gives a `Lifted`; an existing `Lifted` is
      returned as it is.
    - Any other pytree (tuple, NamedTuple such as `optax.GradientTransformation`,
      dict, list, registered node) gives the same structure with every function
      found inside it lifted. Pytrees that are callable (an `equinox.Module`,
      `jax.tree_util.Partial`) are kept, their function leaves lifted.

    ```python
    import jax
    import jax.numpy as jnp
    import lift

    def make_scale(lr):
        return lift.lift(lambda g: -lr * g)

    traces = 0

    @jax.jit
    def apply(scale, g):
        global traces
        traces += 1
        return scale(g)

    for lr in (0.1, 0.01, 0.001):
        apply(make_scale(lr), jnp.ones(3))
    assert traces == 1  # one program for every learning rate
    ```

    **Arguments:**

    - `obj`: the function or pytree to lift.
    - `static`: names of captured variables (free variables, default parameters,
      partial keywords; at any depth) to keep static whatever their type.
    - `dynamic`: a predicate on a captured leaf, replacing the default rule
      (arrays, tracers, NumPy values, Python `float` and `complex` are dynamic).

    **Returns:** a `Lifted`, or `obj`'s structure with its functions lifted.

    **Raises:** `lift.LiftError` for a builtin, a class, a callable that is not a
    pytree, or a bare value, and for captures that cannot be leaves.
    """
    if obj is None:

        def decorator(fn: Any) -> Any:
            return lift(fn, static=static, dynamic=dynamic)

        return decorator
    options = bool(static) or dynamic is not None
    if isinstance(obj, Lifted):
        if not options:
            return cast(Any, obj)
        cls = cast("type[Lifted[Any, Any]]", type(obj))  # pyright: ignore[reportUnknownArgumentType]
        return cls(cast(Any, obj), static=static, dynamic=dynamic)
    if is_function_like(obj):
        return Lifted(obj, static=static, dynamic=dynamic)
    try:
        if is_cyclic(obj):
            raise RecursionError
        leaves, treedef = jtu.tree_flatten(obj, is_leaf=_is_liftable)
    except RecursionError:
        raise LiftError(
            f"lift() got a {type(obj).__name__} that contains itself or nests "
            "too deeply for JAX's pytree flattening.\nFix: lift the functions inside it one by one."
        ) from None
    if jtu.treedef_is_leaf(treedef) and treedef.num_leaves == 1:
        raise _reject(obj, Lifted)
    out: list[Any] = []
    for leaf in leaves:
        new: Any = leaf
        if isinstance(leaf, Lifted) and options:
            cls = cast("type[Lifted[Any, Any]]", type(leaf))  # pyright: ignore[reportUnknownArgumentType]
            new = cls(cast(Any, leaf), static=static, dynamic=dynamic)
        elif is_function_like(leaf):
            new = Lifted(
                cast("Callable[..., Any]", leaf), static=static, dynamic=dynamic
            )
        out.append(new)
    return jtu.unflatten(treedef, out)


def _is_liftable(x: Any) -> bool:
    return is_function_like(x) or isinstance(x, Lifted)


def _unlift_one(x: Any) -> Any:
    return build(x._skeleton, x._leaves) if isinstance(x, Lifted) else x


def is_lifted(x: Any) -> bool:
    """Whether `x` is a [`lift.Lifted`][] (of any subclass).

    ```python
    import lift

    assert lift.is_lifted(lift.lift(lambda x: x))
    assert not lift.is_lifted(lambda x: x)
    ```
    """
    return isinstance(x, Lifted)


def unlift(x: Any) -> Any:
    """Plain Python functions back from [`lift.Lifted`][]: for code that demands one.

    A `Lifted` gives a new function (fresh cells) whose captures are its current
    leaves; a pytree gives the same structure with every `Lifted` unlifted; other
    values are returned as they are.

    ```python
    import types
    import jax.numpy as jnp
    import lift

    w = jnp.asarray(2.0)
    f = lift.unlift(lift.lift(lambda x: w * x))
    assert isinstance(f, types.FunctionType)
    assert f(3.0) == 6.0
    ```
    """
    if isinstance(x, Lifted):
        return build(x._skeleton, x._leaves)
    return jtu.tree_map(
        _unlift_one,
        x,
        is_leaf=is_lifted,
    )
