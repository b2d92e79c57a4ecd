"""Capturing a closure: walk a function's graph into a `Skeleton` and its leaves.

The walk is iterative (a queue of nodes), visits each function, cell, partial and
bound method once (cycles and recursion included), and walks every captured
value as a pytree whose function leaves become nodes in turn. It reads the user's
objects and never writes to them.
"""

from __future__ import annotations

import collections
import collections.abc
import threading
import time
import types
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import jax
import numpy as np

from . import _gc
from ._code import code_info
from ._compat import Tracer
from ._errors import LiftError, describe
from ._replay import replay, walked
from ._skeleton import (
    CellNode,
    FunctionNode,
    MethodNode,
    Node,
    PartialNode,
    Ref,
    Skeleton,
    Slot,
    Static,
    Template,
)
from ._trees import ITERATORS, MAX_CONTAINER_DEPTH, flatten_checked, is_function_like

__all__ = ["capture", "default_dynamic", "is_function_like"]

_Tracer: Final = Tracer
_ArrayImpl: Final[type[Any]] = type(jax.device_put(np.zeros(())))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType, reportUnknownVariableType]

# Leaves decided by type alone (the fast path of a sweep re-lifting optimizers).
_STATIC_ATOMS: Final = frozenset(
    {
        int,
        bool,
        str,
        bytes,
        type(None),
        type(Ellipsis),
        type,
        types.ModuleType,
        np.dtype,
    }
)
_DYNAMIC_ATOMS: Final = frozenset({float, complex, _ArrayImpl, np.ndarray})
_PY_SCALARS: Final = (float, complex, int)
# Objects the hidden-tracer scan does not look inside.
_OPAQUE_SKIP: Final = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.CodeType,
    str,
    bytes,
    int,
    float,
    complex,
    np.dtype,
    np.ndarray,
    jax.Array,
    *ITERATORS,
)
_SCAN_LIMIT: Final = 10_000


def default_dynamic(x: Any) -> bool:
    """The default rule: arrays, tracers, NumPy values, Python `float`/`complex`."""
    t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
    if issubclass(t, (_Tracer, np.ndarray, np.generic, float, complex)):
        return True
    try:
        return isinstance(x, jax.Array)
    except Exception:  # an object whose attribute access fails: static
        return False


def is_jax_value(x: Any) -> bool:
    """What a dynamic leaf may be: something `jax.jit` takes as an argument."""
    return default_dynamic(x) or type(x) in (int, bool)  # pyright: ignore[reportUnknownArgumentType]


def _hidden_tracer(obj: Any) -> str | None:
    """Path to a tracer hidden inside `obj`'s attributes or containers, if any.

    Bounded (`_SCAN_LIMIT` objects), and safe on hostile objects: types are read
    with `type()`, and an object whose attributes cannot be read is opaque.
    """
    queue: deque[tuple[Any, str]] = deque([(obj, "")])
    seen = {id(obj)}
    count = 0
    while queue and count < _SCAN_LIMIT:
        x, path = queue.popleft()
        count += 1
        t: type[Any] = type(x)  # pyright: ignore[reportUnknownVariableType]
        if issubclass(t, _Tracer):
            return path
        if issubclass(t, _OPAQUE_SKIP):
            continue
        try:
            children = _children(x, t, path)
        except Exception:  # a broken proxy, a mock: nothing to look into
            continue
        for child, child_path in children:
            if id(child) not in seen:
                seen.add(id(child))
                queue.append((child, child_path))
    return None


def _children(x: Any, t: type[Any], path: str) -> list[tuple[Any, str]]:
    if issubclass(t, collections.abc.Mapping):
        return [(v, f"{path}[{k!r}]") for k, v in list(x.items())]
    if issubclass(t, (list, tuple, set, frozenset, collections.deque)):
        return [(v, f"{path}[{i}]") for i, v in enumerate(list(x))]
    attrs: dict[str, Any] = {}
    d = getattr(x, "__dict__", None)
    if type(d) is dict:
        attrs.update(d)  # pyright: ignore[reportUnknownArgumentType]
    for klass in t.__mro__:
        for name in klass.__dict__.get("__slots__", ()):
            if isinstance(name, str) and name not in ("__dict__", "__weakref__"):
                try:
                    attrs[name] = getattr(x, name)
                except AttributeError:
                    pass
    return [(v, f"{path}.{k}") for k, v in attrs.items()]


class _Walk:
    """State of one capture: the nodes found so far and the leaves collected."""

    def __init__(
        self,
        root: Any,
        static: frozenset[str],
        dynamic: Callable[[Any], bool] | None,
    ) -> None:
        self.root = root
        self.static = static
        self.dynamic = dynamic
        self.nodes: list[Node | None] = []
        self.parents: list[tuple[Template, int] | None] = []
        self.ids: dict[int, int] = {}
        self.leaves: list[Any] = []
        self.float_leaves: list[int] = []
        self.queue: deque[tuple[int, Any]] = deque()

    # -- nodes -------------------------------------------------------------------

    def new_node(self, obj: Any) -> int:
        index = len(self.nodes)
        self.nodes.append(None)
        self.parents.append(None)
        self.ids[id(obj)] = index
        self.queue.append((index, obj))
        return index

    def run(self) -> tuple[Skeleton, list[Any]]:
        self.new_node(self.root)
        queue = self.queue
        while queue:
            index, obj = queue.popleft()
            t: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
            if t is types.FunctionType:
                self.nodes[index] = self.function(index, obj)
            elif t is types.MethodType:
                self.nodes[index] = MethodNode(
                    self.template(obj.__func__, index, ("__func__", None), obj),
                    self.template(obj.__self__, index, ("__self__", None), obj),
                )
            elif t is types.CellType:
                pass  # filled in by `function`, which creates cells directly
            else:
                self.nodes[index] = PartialNode(
                    t,
                    self.template(obj.func, index, ("func", None), obj),
                    tuple(
                        self.template(a, index, ("args", i), obj)
                        for i, a in enumerate(obj.args)
                    ),
                    tuple(
                        (k, self.template(v, index, ("keywords", k), obj, name=k))
                        for k, v in obj.keywords.items()
                    ),
                )
        nodes: list[Node] = self.nodes  # type: ignore[assignment]
        return (
            Skeleton(
                nodes,
                self.order(nodes),
                self.parents,
                len(self.leaves),
                frozenset(self.float_leaves),
                tuple[type[Any], ...](type(leaf) for leaf in self.leaves),  # pyright: ignore[reportUnknownArgumentType]
            ),
            self.leaves,
        )

    def function(self, index: int, fn: types.FunctionType) -> FunctionNode:
        info = code_info(fn.__code__)
        cells: list[int] = []
        for name, cell in zip(info.freevars, fn.__closure__ or (), strict=True):
            cell_index = self.ids.get(id(cell))
            if cell_index is None:
                cell_index = len(self.nodes)
                self.nodes.append(None)
                self.parents.append(None)
                self.ids[id(cell)] = cell_index
                try:
                    contents = cell.cell_contents
                except ValueError:  # an empty cell: keep it empty
                    template = None
                else:
                    template = self.template(
                        contents,
                        cell_index,
                        ("captures", name),
                        fn,
                        name=name,
                        info_branched=info.branched,
                    )
                    if name in info.rebound and any(
                        type(s) is not Static for s in template.slots
                    ):
                        raise LiftError(
                            f"{describe(fn)} rebinds the captured variable {name!r} "
                            f"(`nonlocal {name}; {name} = ...`), which holds "
                            f"{_what(template, self.leaves)}. A lifted function's "
                            "dynamic captures are pytree leaves and cannot be "
                            "reassigned from inside it.\n"
                            f"Fix: pass {name!r} as an argument and return its new "
                            "value, or keep it static with "
                            f"`lift(f, static=({name!r},))` if it is not an array."
                        )
                self.nodes[cell_index] = CellNode(template, name, index)
            cells.append(cell_index)
        defaults = fn.__defaults__
        default_templates = None
        if defaults is not None:
            names = info.positional[len(info.positional) - len(defaults) :]
            default_templates = tuple(
                self.template(
                    v, index, ("captures", n), fn, name=n, info_branched=info.branched
                )
                for n, v in zip(names, defaults, strict=True)
            )
        kwdefaults = fn.__kwdefaults__
        kw_templates = None
        if kwdefaults:
            kw_templates = tuple(
                (
                    k,
                    self.template(
                        v,
                        index,
                        ("captures", k),
                        fn,
                        name=k,
                        info_branched=info.branched,
                    ),
                )
                for k, v in kwdefaults.items()
            )
        attrs: dict[str, Any] = {"__doc__": fn.__doc__, "__module__": fn.__module__}
        annotations = fn.__annotations__
        if annotations:
            attrs["__annotations__"] = annotations
        if fn.__dict__:
            attrs.update(fn.__dict__)
        return FunctionNode(
            info,
            fn.__globals__,
            fn.__name__,
            fn.__qualname__,
            tuple(cells),
            default_templates,
            kw_templates,
            attrs,
        )

    # -- values ------------------------------------------------------------------

    def template(
        self,
        value: Any,
        owner: int,
        label: tuple[str, str | int | None],
        holder: Any,
        *,
        name: str | None = None,
        info_branched: frozenset[str] = frozenset(),
    ) -> Template:
        forced = name is not None and name in self.static
        t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
        if (t in _STATIC_ATOMS and self.dynamic is None) or issubclass(t, ITERATORS):
            return Template(None, (Static(value),), owner, label)
        if forced or t not in _DYNAMIC_ATOMS or self.dynamic is not None:
            if is_function_like(value):
                leaves = [value]
                treedef = None
            else:
                flat = flatten_checked(value, is_function_like)
                if flat is None:
                    raise LiftError(
                        f"{describe(holder)} captures {_variable(name, label)}, a "
                        "container that contains itself or nests more than "
                        f"{MAX_CONTAINER_DEPTH} levels deep, which JAX's pytree "
                        "flattening cannot take.\nFix: pass it as an argument, or keep it static "
                        f"with `lift(f, static=({name or 'name'!r},))`."
                    )
                leaves, treedef = flat
                if treedef.num_nodes == 1 and treedef.num_leaves == 1:
                    treedef = None
        else:
            leaves = [value]
            treedef = None
        branched = name is not None and name in info_branched
        slots: list[Slot] = []
        new_nodes: list[tuple[int, int]] = []
        for pos, leaf in enumerate(leaves):
            slots.append(
                self.slot(leaf, forced, branched, holder, name, label, new_nodes, pos)
            )
        template = Template(treedef, tuple(slots), owner, label)
        for node_index, pos in new_nodes:
            self.parents[node_index] = (template, pos)
        return template

    def slot(
        self,
        leaf: Any,
        forced: bool,
        branched: bool,
        holder: Any,
        name: str | None,
        label: tuple[str, str | int | None],
        new_nodes: list[tuple[int, int]],
        pos: int,
    ) -> Slot:
        t: type[Any] = type(leaf)  # pyright: ignore[reportUnknownVariableType]
        if t in _STATIC_ATOMS and (forced or self.dynamic is None):
            return Static(leaf)
        if not forced and is_function_like(leaf):
            index = self.ids.get(id(leaf))
            if index is None:
                index = self.new_node(leaf)
                new_nodes.append((index, pos))
            return Ref(index)
        if forced:
            dyn = False
        elif self.dynamic is not None:
            dyn = bool(self.dynamic(leaf))
            if dyn and not is_jax_value(leaf):
                raise LiftError(
                    f"{describe(holder)} captures {_variable(name, label)}, a "
                    f"{t.__name__}, which your `dynamic=` predicate made a leaf, but "
                    "JAX cannot trace it.\nFix: make the predicate accept only "
                    "arrays and numbers, or keep it static with "
                    f"`lift(f, static=({name or 'name'!r},))`."
                )
        else:
            dyn = t in _DYNAMIC_ATOMS or default_dynamic(leaf)
        if dyn and branched and issubclass(t, _PY_SCALARS):
            # `if b2 != 1.0:` in Python: a traced b2 could not run. Keep it static.
            dyn = False
        if dyn:
            index = len(self.leaves)
            self.leaves.append(leaf)
            if issubclass(t, _PY_SCALARS):
                self.float_leaves.append(index)
            return index
        if issubclass(t, _Tracer):
            raise LiftError(
                f"{describe(holder)} captures {_variable(name, label)} as static, "
                f"but it holds a tracer ({_aval(leaf)}). A static capture becomes "
                "part of the compiled program's key and would leak the tracer.\n"
                "Fix: let it be dynamic (remove it from `static=`, or make your "
                "`dynamic=` predicate accept tracers)."
            )
        if not issubclass(t, (*_OPAQUE_SKIP, np.generic)):
            where = _hidden_tracer(leaf)
            if where is not None:
                raise LiftError(
                    f"{describe(holder)} captures {_variable(name, label)}, a "
                    f"{type(leaf).__name__} that is not a pytree and holds a "
                    f"tracer at {name or label[0]}{where}. lift cannot make "
                    "that tracer a leaf, and keeping it would leak it.\n"
                    "Fix: convert the function with `lift.closure_convert(f, "
                    "*example_args)`, register the class as a pytree, or pass the "
                    "value as an argument."
                )
        return Static(leaf)

    @staticmethod
    def order(nodes: list[Node]) -> tuple[int, ...]:
        """Partial and method nodes, each after the partials/methods it refers to."""
        pending = {
            i: {
                s.index
                for t in _node_templates(n)
                for s in t.slots
                if type(s) is Ref
                and isinstance(nodes[s.index], (PartialNode, MethodNode))
            }
            for i, n in enumerate(nodes)
            if isinstance(n, (PartialNode, MethodNode))
        }
        out: list[int] = []
        done: set[int] = set()
        while pending:
            ready = [i for i, deps in pending.items() if deps <= done]
            if not ready:
                raise LiftError(
                    "the captured partials or bound methods refer to each other in a "
                    "cycle, which cannot be rebuilt.\nFix: break the cycle through a "
                    "function (a closure can refer to itself)."
                )
            for i in sorted(ready):
                out.append(i)
                done.add(i)
                del pending[i]
        return tuple(out)


def _node_templates(node: Node) -> list[Template]:
    if isinstance(node, PartialNode):
        return [node.func, *node.args, *(t for _, t in node.keywords)]
    if isinstance(node, MethodNode):
        return [node.func, node.self_]
    return []


def _variable(name: str | None, label: tuple[str, str | int | None]) -> str:
    if name is not None:
        return f"variable {name!r}"
    kind, key = label
    return f"`.{kind}`" if key is None else f"`.{kind}[{key!r}]`"


def _aval(x: Any) -> str:
    aval = getattr(x, "aval", None)
    return str(aval) if aval is not None else type(x).__name__


def _what(template: Template, leaves: list[Any]) -> str:
    for s in template.slots:
        if type(s) is int:
            return f"a dynamic value ({_aval(leaves[s])})"
    return "a function"


def capture(
    obj: Any,
    *,
    static: frozenset[str] = frozenset(),
    dynamic: Callable[[Any], bool] | None = None,
) -> tuple[Skeleton, list[Any]]:
    """Walk `obj` (a function, bound method or partial) into a skeleton and leaves.

    A closure shaped like one captured before (same code objects, equal static
    captures: the common case of a sweep re-lifting fresh optimizers) is replayed
    against that skeleton, which is then shared; anything else takes the full walk.
    """
    if dynamic is not None:
        return _walk(obj, static, dynamic)
    key = (_entry_code(obj), static)
    previous = _recent_skeletons.get(key)
    if previous is not None:
        leaves = replay(previous, obj)
        if leaves is not None:
            return previous, leaves
    start = time.perf_counter()
    skeleton, leaves = _walk(obj, static, dynamic)
    if previous is not None and skeleton == previous:
        walked(previous, time.perf_counter() - start)  # towards compiling its replay
        return previous, leaves
    if key[0] is not None:
        with _lock:
            _recent_skeletons[key] = skeleton
            _keep.append(skeleton)
    return skeleton, leaves


def _walk(
    obj: Any, static: frozenset[str], dynamic: Callable[[Any], bool] | None
) -> tuple[Skeleton, list[Any]]:
    with _gc.paused():
        return _Walk(obj, static, dynamic).run()


# The last skeleton seen per entry code object, weakly, plus a ring of the 8 most
# recent, strongly, so that a sweep's few shapes (an optimizer's init and update)
# survive between two lifts even when nothing else keeps them.
_recent_skeletons: weakref.WeakValueDictionary[tuple[Any, frozenset[str]], Skeleton] = (
    weakref.WeakValueDictionary()
)
_keep: deque[Skeleton] = deque(maxlen=8)
_lock = threading.Lock()


def _entry_code(obj: Any) -> Any:
    for _ in range(8):
        code = getattr(obj, "__code__", None)
        if type(code) is types.CodeType:
            return (id(code), type(obj))
        obj = getattr(obj, "__func__", None) or getattr(obj, "func", None)
        if obj is None:
            return None
    return None
