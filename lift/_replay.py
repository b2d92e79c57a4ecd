"""Re-capturing a closure shaped like one seen before, without building a skeleton.

A sweep lifts a fresh optimizer per learning rate: the same code objects, the
same static captures, new leaves. For such a skeleton we generate, once, a
straight-line Python function that walks a new object in the order the skeleton
records, checks at every step that it would capture to the very same skeleton
(same code object, globals, names, container structures, static values, leaf
types, and sharing of nodes and cells) and returns its leaves, or `None` at the
first difference, in which case the caller takes the full walk. This is how
`dataclasses` and `attrs` make their methods fast: the checks are specialised
away into constants.
"""

from __future__ import annotations

import itertools
import time
import types
from collections.abc import Callable
from typing import Any, Final, cast

from . import _trees as jtu
from ._skeleton import (
    CellNode,
    FunctionNode,
    MethodNode,
    PartialNode,
    Ref,
    Skeleton,
    Static,
    Template,
)
from ._trees import is_cyclic, is_function_like

__all__ = ["replay", "walked"]

# A replay is compiled once re-walking its graph has cost as much as compiling it
# would: the rent-or-buy rule, never more than twice the cost of the best choice
# made in hindsight. Walking costs 2-8 µs per node, generating and compiling the
# replay 25-75 µs (ten to sixteen walks), replaying it 0.2-1 µs. The estimate
# `_seconds_per_node` starts at 50 µs and then follows what compiles measure.
# Beyond `MAX_NODES` nodes a graph is never compiled (its source would be
# megabytes).
MAX_NODES: Final = 50_000
_seconds_per_node = 50e-6
# Static values compared by value (others must be the very same object; anything
# else takes the full walk, which also scans objects for hidden tracers).
_ATOMS: Final = frozenset({int, bool, str, bytes, float, complex, type(None)})
_NO_REPLAY: Final = "no replay"
_counter = itertools.count()


def replay(skeleton: Skeleton, obj: Any) -> list[Any] | None:
    """The leaves of `obj` if it captures to exactly `skeleton`, else `None`."""
    cache = skeleton.cache
    fn = cache.get("replay")
    if fn is None:
        if cache.get("walked", 0.0) < compile_cost(skeleton):
            return None
        fn = cache["replay"] = _compile(skeleton)
    if fn is _NO_REPLAY:
        return None
    try:
        return fn(obj)  # type: ignore[operator]
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None


def compile_cost(skeleton: Skeleton) -> float:
    """Estimated seconds to generate and compile `skeleton`'s replay."""
    return len(skeleton.nodes) * _seconds_per_node


def walked(skeleton: Skeleton, seconds: float) -> None:
    """Count a full walk that captured to `skeleton` again towards compiling it."""
    cache = skeleton.cache
    cache["walked"] = cache.get("walked", 0.0) + seconds


class _Writer:
    """Accumulates the generated function's lines and constants."""

    def __init__(self, skeleton: Skeleton) -> None:
        self.skeleton = skeleton
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {
            "FunctionType": types.FunctionType,
            "MethodType": types.MethodType,
            "flatten": jtu.tree_flatten,
            "is_function_like": is_function_like,
            "is_cyclic": is_cyclic,
        }
        # One name per distinct constant (by identity; `consts` keeps it alive).
        self.const_names: dict[int, str] = {}
        self.visited: set[int] = set()  # nodes whose object is bound, in walk order
        self.names = (f"v{i}" for i in itertools.count())

    def const(self, value: Any) -> str:
        name = self.const_names.get(id(value))
        if name is None:
            name = self.const_names[id(value)] = f"K{len(self.consts)}"
            self.consts[name] = value
        return name

    def emit(self, line: str, indent: int = 1) -> None:
        self.lines.append("    " * indent + line)

    def fail_unless(self, cond: str) -> None:
        self.emit(f"if not ({cond}): return None")

    def bind(self, index: int, expr: str) -> None:
        """Bind node `index` to `expr`: the first time, as a new distinct object."""
        if index in self.visited:
            self.fail_unless(f"{expr} is o{index}")
        else:
            self.visited.add(index)
            self.emit(f"o{index} = {expr}")

    def slot(self, slot: Any, expr: str) -> None:
        if type(slot) is int:
            self.emit(f"l{slot} = {expr}")
            self.fail_unless(
                f"type(l{slot}) is {self.const(self.skeleton.leaf_types[slot])}"
            )
        elif type(slot) is Ref:
            self.bind(slot.index, expr)
        else:
            assert isinstance(slot, Static)
            value = slot.value
            k = self.const(value)
            if slot.by_identity or type(value) not in _ATOMS:
                self.fail_unless(f"{expr} is {k}")
            else:
                t = self.const(type(value))
                if not expr.isidentifier():
                    self.emit(f"s = {expr}")
                    expr = "s"
                self.fail_unless(
                    f"{expr} is {k} or (type({expr}) is {t} and {expr} == {k})"
                )

    def template(self, template: Template, expr: str) -> None:
        if template.treedef is None:
            self.slot(template.slots[0], expr)
            return
        v = next(self.names)
        self.emit(f"{v} = {expr}")
        self.fail_unless(f"not is_cyclic({v})")
        self.emit(f"{v}, td = flatten({v}, is_leaf=is_function_like)")
        self.fail_unless(f"td == {self.const(template.treedef)}")
        for pos, slot in enumerate(template.slots):
            self.slot(slot, f"{v}[{pos}]")

    def function(self, index: int, node: FunctionNode) -> None:
        o = f"o{index}"
        checks = [
            f"type({o}) is FunctionType",
            f"{o}.__code__ is {self.const(node.info.code)}",
            f"{o}.__globals__ is {self.const(node.globals)}",
            f"{o}.__name__ == {node.name!r}",
            f"{o}.__qualname__ == {node.qualname!r}",
        ]
        if node.defaults is None:
            checks.append(f"{o}.__defaults__ is None")
        if node.kwdefaults is None:
            checks.append(f"not {o}.__kwdefaults__")
        self.fail_unless(" and ".join(checks))
        if node.cells:
            # The code object fixes the closure's length: unpack it in one step,
            # a cell met for the first time straight into its name, one met
            # before (in an earlier closure, or earlier in this one) into a
            # temporary checked against it.
            first: list[bool] = []
            for c in node.cells:
                first.append(c not in self.visited)
                self.visited.add(c)
            targets = [
                f"o{c}" if new else f"c{j}"
                for j, (c, new) in enumerate(zip(node.cells, first, strict=True))
            ]
            self.emit(f"{', '.join(targets)}, = {o}.__closure__")
            for j, (c, new) in enumerate(zip(node.cells, first, strict=True)):
                if not new:
                    self.fail_unless(f"c{j} is o{c}")
                    continue
                template = self.skeleton.nodes[c].template  # type: ignore[union-attr]
                if template is None:
                    self.emit("try:")
                    self.emit(f"o{c}.cell_contents", 2)
                    self.emit("return None", 2)
                    self.emit("except ValueError:")
                    self.emit("pass", 2)
                else:
                    self.template(cast(Template, template), f"o{c}.cell_contents")
        if node.defaults is not None:
            self.emit(f"d = {o}.__defaults__")
            self.fail_unless(f"len(d) == {len(node.defaults)}")
            for k, t in enumerate(node.defaults):
                self.template(t, f"d[{k}]")
        if node.kwdefaults is not None:
            self.emit(f"kd = {o}.__kwdefaults__")
            self.fail_unless(f"len(kd) == {len(node.kwdefaults)}")
            for k, t in node.kwdefaults:
                self.template(t, f"kd[{k!r}]")

    def write(self) -> str:
        skeleton = self.skeleton
        self.visited.add(0)
        for i, node in enumerate(skeleton.nodes):
            o = f"o{i}"
            if isinstance(node, FunctionNode):
                self.function(i, node)
            elif isinstance(node, MethodNode):
                self.fail_unless(f"type({o}) is MethodType")
                self.template(node.func, f"{o}.__func__")
                self.template(node.self_, f"{o}.__self__")
            elif isinstance(node, PartialNode):
                self.fail_unless(
                    f"type({o}) is {self.const(node.cls)} and len({o}.args) == {len(node.args)} "
                    f"and len({o}.keywords) == {len(node.keywords)}"
                )
                self.template(node.func, f"{o}.func")
                for k, t in enumerate(node.args):
                    self.template(t, f"{o}.args[{k}]")
                for k, t in node.keywords:
                    self.template(t, f"{o}.keywords[{k!r}]")
            else:
                assert isinstance(node, CellNode)  # bound by the function owning it
        # Distinct nodes are distinct objects: one set built in C at the end
        # (cheaper than adding to a set node by node, whose misses grow with it).
        nodes = ", ".join(f"o{i}" for i in range(len(skeleton.nodes)))
        self.fail_unless(f"len(set(map(id, ({nodes},)))) == {len(skeleton.nodes)}")
        leaves = ", ".join(f"l{k}" for k in range(skeleton.nleaves))
        self.emit(f"return [{leaves}]")
        return "def replay(o0):\n" + "\n".join(self.lines) + "\n"


def _compile(skeleton: Skeleton) -> Callable[[Any], list[Any] | None] | str:
    if len(skeleton.nodes) > MAX_NODES:
        return _NO_REPLAY
    global _seconds_per_node
    start = time.perf_counter()
    writer = _Writer(skeleton)
    source = writer.write()
    namespace = dict(writer.consts)
    exec(compile(source, f"<lift replay {next(_counter)}>", "exec"), namespace)
    measured = (time.perf_counter() - start) / len(skeleton.nodes)
    _seconds_per_node = (_seconds_per_node + measured) / 2
    return namespace["replay"]
