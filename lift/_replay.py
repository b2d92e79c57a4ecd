"""Re-capturing a closure shaped like one seen before, without building a skeleton.

A sweep lifts a fresh optimizer per learning rate: the same code objects, the
same static captures, new leaves. For such a skeleton we generate, once, a
straight-line Python function that walks a new object in the order the skeleton
records, checks at every step that it would capture to the very same skeleton
(same code object, globals, names, container structures, static values, leaf
classes, and sharing of nodes and cells) and returns its leaves, or `None` at
the first difference, in which case the caller takes the full walk. This is how
`dataclasses` and `attrs` make their methods fast: the checks are specialised
away into constants.

The replay restates no decision of the full walk (`lift._capture`): each is
one function, which the walk calls and the generated code calls (or the
generator reads when it compiles); a decision it cannot state cheaply makes
the shape, or the node, take the full walk.

| Decision | Stated once in | The replay |
|---|---|---|
| What a node is (function, bound method, registered holder, partial) | `_Walk.run`; `is_function_like` | checks the recorded node's exact type |
| Which parts are read, in which order | `lift._closure` (`function_parts`, `partial_parts`, `method_parts`, `Holder.parts`, `Label.source`) | reads each part by its label's `source` |
| A capture's structure | `flatten_checked(v, is_function_like)`, `read_as_tuple` | the same call, treedef compared; a flat tuple/list/NamedTuple unpacked when `read_as_tuple` says JAX reads it so |
| Static or dynamic (`dynamic=`, `static=`, branch analysis, float conversion, dtypes JAX cannot hold) | `_Walk.kind`, which reads of a leaf only its `leaf_class` | checks `leaf_class` of each leaf (its type, inlined, but for NumPy arrays); `static=`/`dynamic=` shapes are never replayed (`capture`) |
| The key of a static | `static_key` | compares by `static_key` (inlined for atoms); a static compared by more than its key (`Static.exact` false: a user's own list or dict, a class's `__eq__`) is never replayed (`_replayable`) |
| A hidden tracer in a static, a tracer in static pytree data | `scanned` + `hidden_tracer`; `has_aux` + `aux_tracer` | the same calls; any tracer found: the full walk (which refuses, or marks a live one) |
| Dicts JAX reorders or compares loosely | `irregular`, `ordered` | `irregular` true: the full walk; a template recorded with an order: never replayed |
| Attributes read through the global naming the function | `attributes_by_global` | never replayed (depends on what the global holds now) |
| Sharing and cycles | the walk's `ids` (one node per object); `flatten_checked`'s cycle guard | every node bound once and checked distinct at the end; the same `flatten_checked` |
| Mutated containers | the call (`lift._copies`), after the walk | nothing to decide: the walk's answer does not depend on what code mutates |
| Rebinding a dynamic capture | `CodeInfo.rebound` | the same code and leaf classes give the same answer |
| Empty cells | `_Walk.cell` | a skeleton holding one is never kept for replay (`Skeleton.user_cells`) |
"""

from __future__ import annotations

import itertools
import operator
import types
from collections.abc import Callable
from typing import Any, Final, cast

from ._atoms import EXACT
from ._closure import has_aux
from ._hidden import aux_tracer, hidden_tracer
from ._labels import ATTR, DEFAULT, KEYWORD, KWDEFAULT, Label
from ._nodes import (
    CellNode,
    FunctionNode,
    HolderNode,
    MethodNode,
    PartialNode,
    Ref,
    Static,
    Template,
)
from ._skeleton import Skeleton
from ._static import aux_key, leaf_class, scanned, static_key
from ._trees import flatten_checked, irregular, is_function_like, read_as_tuple
from ._verify import STATE

__all__ = ["replay", "walked"]

# A shape's replay is compiled when a closure of that shape has been walked
# `REPLAY_AFTER` times more (walking costs 2-8 µs a node, generating and compiling
# the replay 25-75 µs, replaying it 0.2-1 µs: eight walks pay for a compile), and
# with `lift.verifying()` on, at its first re-walk, so that it is checked. Which
# path a lift takes depends only on how many lifts of that shape came before,
# never on timings. Beyond `MAX_NODES` nodes a graph is never compiled (its source
# would be megabytes).
REPLAY_AFTER: Final = 8
MAX_NODES: Final = 50_000
# Static values compared by value (others must be the very same object; anything
# else takes the full walk, which also scans objects for hidden tracers): the
# exact scalars, as `static_key` compares them (not floats: their key is their
# bits, checked below).
_ATOMS: Final = EXACT
_NO_REPLAY: Final = "no replay"
_counter = itertools.count()


def replay(skeleton: Skeleton, obj: Any) -> list[Any] | None:
    """The leaves of `obj` if it captures to exactly `skeleton`, else `None`."""
    fn = skeleton.replay
    if fn is None:
        if skeleton.walked < (min(1, REPLAY_AFTER) if STATE.on else REPLAY_AFTER):
            return None
        fn = skeleton.replay = _compile(skeleton)
    if fn is _NO_REPLAY:
        return None
    try:
        return fn(obj)  # type: ignore[operator]
    except Exception:  # anything the replay cannot read: the full walk decides
        return None


def walked(skeleton: Skeleton) -> None:
    """Count a full walk that captured to `skeleton` again towards compiling it."""
    skeleton.walked += 1


class _Writer:
    """Accumulates the generated function's lines and constants."""

    def __init__(self, skeleton: Skeleton) -> None:
        self.skeleton = skeleton
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {
            "FunctionType": types.FunctionType,
            "MethodType": types.MethodType,
            # The full walk's own flattening (cycles and depth guarded).
            "flatten_checked": flatten_checked,
            "is_function_like": is_function_like,
            "irregular": irregular,
            "static_key": static_key,
            "hidden_tracer": hidden_tracer,
            "aux_tracer": aux_tracer,
            "aux_key": aux_key,
            "leaf_class": leaf_class,
            "is_": operator.is_,
            "tuple_iter": tuple.__iter__,  # pyright: ignore[reportUnknownMemberType]
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

    def local(self, expr: str) -> str:
        if expr.isidentifier():
            return expr
        self.emit(f"s = {expr}")
        return "s"

    def slot(self, slot: Any, expr: str) -> None:
        if type(slot) is int:
            recorded = self.skeleton.leaf_types[slot]
            self.emit(f"l{slot} = {expr}")
            if type(recorded) is tuple:
                # A NumPy array: all the walk's rule reads of it (`leaf_class`).
                check = f"leaf_class(l{slot}) == {self.const(recorded)}"
            else:
                # Any other leaf's class is its type (`leaf_class`), inlined.
                check = f"type(l{slot}) is {self.const(recorded)}"
            self.fail_unless(check)
        elif type(slot) is Ref:
            self.bind(slot.index, expr)
        else:
            # What the full walk would make of the value: the same static by
            # type and value (`static_key`), and no tracer hidden inside it
            # (`scanned`, `hidden_tracer`: else the walk decides, refusing or
            # marking it live).
            assert isinstance(slot, Static)
            value = slot.value
            t: type[Any] = type(value)  # pyright: ignore[reportUnknownVariableType]
            k = self.const(value)
            s = self.local(expr)
            if value is None:
                self.fail_unless(f"{s} is None")
            elif slot.by_identity:
                self.fail_unless(f"{s} is {k}")
            elif t in _ATOMS:  # (int, bool, str, bytes): `static_key` inlined
                self.fail_unless(
                    f"{s} is {k} or (type({s}) is {self.const(t)} and {s} == {k})"
                )
            elif t is float or t is complex:
                self.fail_unless(
                    f"type({s}) is {self.const(t)} and static_key({s}) == "
                    f"{self.const(static_key(value))}"
                )
            else:
                key = self.const(static_key(value))
                self.fail_unless(f"{s} is {k} or static_key({s}) == {key}")
            if scanned(t):
                self.fail_unless(f"hidden_tracer({s}) is None")

    def template(self, template: Template, expr: str) -> None:
        if template.treedef is None:
            self.slot(template.slots[0], expr)
            return
        v = next(self.names)
        self.emit(f"{v} = {expr}")
        flat = _flat_sequence(template)
        if flat is not None:
            # A tuple, list or NamedTuple of leaves and functions (an optimizer's
            # transformations): JAX's flattening of a value of that very type
            # gives its items in order, so they are unpacked directly (a wrong
            # length raises, and the full walk decides). Each item is checked as
            # a slot: a function's node checks its exact type, a leaf its type, a
            # static its value, so the value holds no nested container that
            # could make it cyclic or change the treedef.
            self.fail_unless(f"type({v}) is {self.const(flat)}")
            # A NamedTuple's items as a tuple's (as JAX reads them), whatever its
            # class may have been given since.
            seq = v if flat is tuple or flat is list else f"tuple_iter({v})"
            if not template.slots:
                self.fail_unless(f"not tuple({seq})")
                return
            items: list[str] = []
            later: list[tuple[Any, str]] = []
            for pos, slot in enumerate(template.slots):
                if type(slot) is Ref and slot.index not in self.visited:
                    self.visited.add(slot.index)  # a function met first: bound
                    items.append(f"o{slot.index}")
                else:
                    items.append(f"{v}_{pos}")
                    later.append((slot, items[-1]))
            self.emit(f"{', '.join(items)}, = {seq}")
            for slot, item in later:
                self.slot(slot, item)
            return
        # Values whose dicts JAX would reorder or compare loosely take the full
        # walk (only possible when the recorded structure has dicts), and so do
        # those the walk's own flattening refuses (cyclic, too deep: JAX's
        # would not return).
        if "{" in str(template.treedef) or "dict" in str(template.treedef):
            self.fail_unless(f"not irregular({v})")
        self.emit(f"flat = flatten_checked({v}, is_function_like)")
        self.fail_unless("flat is not None")
        self.emit(f"{v}, td = flat")
        self.fail_unless(f"td == {self.const(template.treedef)}")
        if has_aux(template.treedef):
            self.fail_unless("aux_tracer(td) is None")
        if template.aux is not None:
            # JAX compares static data with `==` (`1 == True`): exactly too.
            self.fail_unless(f"aux_key(td) == {self.const(template.aux)}")
        for pos, slot in enumerate(template.slots):
            self.slot(slot, f"{v}[{pos}]")

    def keys_check(self, expr: str, labels: list[Label]) -> str:
        """That `expr` (a dict) has exactly the keys of `labels`, in their order."""
        if not labels:
            return f"not {expr}"
        keys = tuple(label.key for label in labels)
        return f"tuple({expr}) == {self.const(keys)}"

    def keys(self, expr: str, labels: list[Label]) -> None:
        self.fail_unless(self.keys_check(expr, labels))

    def parts(self, node: Any, o: str) -> None:
        for label, t in node.parts():
            self.template(t, label.source(o))

    def function(self, index: int, node: FunctionNode) -> None:
        o = f"o{index}"
        parts = node.parts()
        kinds = [label.kind for label, _ in parts]
        doc, module, annotations = node.meta.value
        checks = [
            f"type({o}) is FunctionType",
            f"{o}.__code__ is {self.const(node.info.code)}",
            f"{o}.__globals__ is {self.const(node.globals)}",
            f"{o}.__name__ == {node.name!r}",
            f"{o}.__qualname__ == {node.qualname!r}",
            f"{o}.__module__ == {module!r}",
        ]
        if doc is None:
            checks.append(f"{o}.__doc__ is None")
        elif type(doc) is str:
            checks.append(f"{o}.__doc__ == {doc!r}")
        else:
            checks.append(f"{o}.__doc__ is {self.const(doc)}")
        if annotations is None:
            checks.append(f"not {o}.__annotations__")
        else:
            # Each `def` makes a new dict of the same objects (types, or strings
            # from the code's constants): compared by identity, else the full walk.
            keys, values = tuple(annotations), tuple(annotations.values())
            checks.append(
                f"tuple({o}.__annotations__) == {self.const(keys)} and all(map("
                f"is_, {o}.__annotations__.values(), {self.const(values)}))"
            )
        if not node.has_defaults:
            checks.append(f"{o}.__defaults__ is None")
        else:
            checks.append(f"len({o}.__defaults__) == {kinds.count(DEFAULT)}")
        if not node.has_kwdefaults:
            checks.append(f"{o}.__kwdefaults__ is None")
        else:
            checks.append(
                self.keys_check(
                    f"{o}.__kwdefaults__",
                    [lb for lb, _ in parts if lb.kind == KWDEFAULT],
                )
            )
        attrs = [lb for lb, _ in parts if lb.kind == ATTR]
        checks.append(self.keys_check(f"{o}.__dict__", attrs))
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
                cell = cast(CellNode, self.skeleton.nodes[c])
                template = cell.template
                if template is None:
                    # An empty cell is the user's own: this one, still empty.
                    self.fail_unless(f"o{c} is {self.const(cell.cell)}")
                    self.emit("try:")
                    self.emit(f"o{c}.cell_contents", 2)
                    self.emit("return None", 2)
                    self.emit("except ValueError:")
                    self.emit("pass", 2)
                else:
                    self.template(template, f"o{c}.cell_contents")
        self.parts(node, o)

    def write(self) -> str:
        skeleton = self.skeleton
        self.visited.add(0)
        for i, node in enumerate(skeleton.nodes):
            o = f"o{i}"
            if isinstance(node, FunctionNode):
                self.function(i, node)
            elif isinstance(node, MethodNode):
                self.fail_unless(f"type({o}) is MethodType")
                self.parts(node, o)
            elif isinstance(node, HolderNode):
                holder = node.holder
                self.fail_unless(
                    f"type({o}) is {self.const(holder.cls)} and "
                    f"{self.const(holder.static)}({o}) == {self.const(node.static)}"
                )
                self.parts(node, o)
            elif isinstance(node, PartialNode):
                self.fail_unless(
                    f"type({o}) is {self.const(node.cls)} and len({o}.args) == {node.nargs}"
                )
                self.keys(
                    f"{o}.keywords",
                    [lb for lb, _ in node.parts() if lb.kind == KEYWORD],
                )
                self.keys(
                    f"{o}.__dict__", [lb for lb, _ in node.parts() if lb.kind == ATTR]
                )
                self.parts(node, o)
            else:
                assert isinstance(node, CellNode)  # bound by the function owning it
        # Distinct nodes are distinct objects: one set built in C at the end
        # (cheaper than adding to a set node by node, whose misses grow with it).
        nodes = ", ".join(f"o{i}" for i in range(len(skeleton.nodes)))
        self.fail_unless(f"len(set(map(id, ({nodes},)))) == {len(skeleton.nodes)}")
        leaves = ", ".join(f"l{k}" for k in range(skeleton.nleaves))
        self.emit(f"return [{leaves}]")
        return "def replay(o0):\n" + "\n".join(self.lines) + "\n"


def _replayable(skeleton: Skeleton) -> bool:
    """Whether the replay can state every decision the walk made for
    `skeleton`: not when a static is compared by more than its key (a user's
    own list or dict, a class's own `__eq__`: `Static.exact`), nor when a
    capture holds dicts in an order of their own (`Template.order`)."""
    for node in skeleton.nodes:
        if isinstance(node, FunctionNode):
            if not node.meta.exact:
                return False
            if node.name in node.info.global_names and any(
                label.kind == ATTR for label, _ in node.parts()
            ):
                # Whether its attributes are static depends on what the global
                # is bound to now (`attributes_by_global`): the walk's to say.
                return False
        for _, t in node.parts():
            if t.order is not None:
                # Dicts in an order JAX's flattening loses: the walk records
                # it (`ordered`), which a treedef check cannot see.
                return False
            if any(type(s) is Static and not s.exact for s in t.slots):
                return False
    return True


def _flat_sequence(template: Template) -> type | None:
    """The type of a captured tuple, list or NamedTuple whose items are all leaves
    of its treedef (functions, dynamic leaves, statics), else `None`."""
    treedef: Any = template.treedef
    if template.order is not None or treedef.num_nodes != treedef.num_leaves + 1:
        return None
    kind: type[Any]
    kind, aux = treedef.node_data()
    if aux is not None:
        return None
    if kind is tuple or kind is list:
        return kind
    # A NamedTuple that reads its items as a tuple does (as JAX's flattening does).
    if not read_as_tuple(kind):
        return None
    named: type[Any] = kind
    if all(
        getattr(named, name) is getattr(tuple, name)
        for name in ("__iter__", "__len__", "__getitem__")
    ):
        return named
    return None


def _compile(skeleton: Skeleton) -> Callable[[Any], list[Any] | None] | str:
    if len(skeleton.nodes) > MAX_NODES or not _replayable(skeleton):
        return _NO_REPLAY
    writer = _Writer(skeleton)
    source = writer.write()
    namespace = dict(writer.consts)
    exec(compile(source, f"<lift replay {next(_counter)}>", "exec"), namespace)
    return namespace["replay"]
