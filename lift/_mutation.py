"""Which captured containers a function's code mutates in place, and where.

A captured list or dict that holds dynamic leaves is rebuilt around them when
the function is rebuilt: code that appends to it, sets an item or calls a
mutating method would change that copy, not the user's container, so lift
refuses it when it lifts. The bytecode is read once per code object, with the
code objects nested in it (inner functions, lambdas, comprehensions), by
following its stack (`lift._code.Flow`, on CPython 3.11 to 3.13): each slot
holds the paths into captured variables its value is (`x`, `x[0]`, `x['log']`,
`x[k]`, `x.log`, through local variables too: `log = self.log`, and in
the code nested in it that closes over such a local: `log = x['log']; def
add(): log.append(v)`), and what holds a path's items: an iterator over it
or a shallow copy of it (`iter(x)`, `x[:]`, `list(x)`, `x.values()`, `[*x]`,
`{**x}`), `x.items()`, `enumerate(x)`, `zip(x, y)`, whose items are `x[…]`,
or a list, tuple, set or dict the code builds around it, whose items are `x`
(`[x]`, `(x, y)`, `{'a': x}`; `for row in x: row.append(v)` mutates `x[…]`,
`[*x][0].append(v)` too; a
comprehension or a generator expression compiled to code of its own, as all
are on 3.11, is followed with what the iterator it is given holds). The
calls of accessors give what they read (`x.get('log')`, `x.setdefault(k, [])`
and `x.pop(k)` give `x[k]`; `next(it)`, an item; `getattr(x, 'log')`,
`x.log`: by name, `_METHOD_RESULTS` and `_BUILTIN_RESULTS`). The instructions
that mutate an operand record its paths:

- an item store or deletion, whatever computes the key (`x[k] = v`,
  `x[i + 1] = v`, `del x[k]`), and an augmented one (`x['loss'] += v`);
- a slice store or deletion (`x[:] = v`, `x[a:b] = v`, `del x[1:]`);
- an attribute store or deletion (`x.calls = v`, `x.calls += 1`,
  `setattr(x, 'calls', v)`, `del x.calls`), whose path ends in a
  `SETATTR_STEP` (lift refuses it on a registered pytree node it rebuilds);
- a mutating method (`.append`, `.update`, ...: `MUTATORS`), read as an
  attribute even if not called there (`push = x.append`);
- an augmented assignment to the container (`x += [v]`, `x |= {...}`), which
  lists and dicts do in place;
- a call of a function known to mutate its first argument, resolved by the
  object its name is bound to in the function's globals, under any name
  (`heapq.heappush(x, v)`, `hq.heappush`, `from heapq import heappush as push`,
  `random.shuffle`, `np.random.shuffle`: `MUTATING_FUNCTIONS`), or in a
  module the code imports itself; and a builtin container's mutating method
  called unbound (`list.append(x, v)`, `app = dict.update; app(x, other)`:
  `MUTATING_METHODS`).

The path is the one from the captured value to the container mutated
(`state[0].append` mutates `state[0]`, not `state`; a slice store mutates the
container itself): `mutated_paths` gives it, step by step, `ANY` for a key the
code computes. Reading is not mutating: `x[i + 1]`, `x[:]` (a copy, whose
own mutations are not `x`'s: its items' are), `sum(x)`, `len(x)`,
`x['loss'] + v`, or `x` used as another container's key.

Not seen: a function of the user's own (or of a library other than those
listed) that mutates its argument, or a method of another object that does
(`rng.shuffle(x)`); one of those listed reached under another name through
another module (`mylib.push`, set to `heapq.heappush`); a container reached
through the result of another call (`max(rows, key=len).append(v)`,
`copy.copy(x)[0].append(v)`) or passed to a function defined in the code and
mutated there (`def add(r): r.append(v)`, then `add(x)`); what a generator
expression yields (`list(r for r in rows)[0].append(v)`); or a container
stored into another object and mutated there (`box.items = x;
box.items.append(v)`). And the other way: a local holds what all its
assignments stored (`Flow`), so a loop variable reused for two containers
(`for row in a: ...`, then `for row in b: row.append(v)`) counts as mutating
both.

Code with none of the instructions that record (an item, slice or attribute
store or deletion, an augmented operator, the name of a mutating method or
function, `setattr`, or of a global the function's globals bind to one),
itself or in a comprehension it defines, or in a function it defines that
closes over its locals, is not followed at all: most is not (`_may_mutate`,
`_feeds`, `_encloses`).
"""

from __future__ import annotations

import dis
import threading
import types
import weakref
from collections.abc import Mapping
from typing import Any, Final, TypeAlias

from ._flow import Source
from ._mutating_flow import (
    ATTRIBUTE_STORES,
    HOLDING,
    SETATTR_STEP,
    VARIABLES,
    Call,
    Mutations,
    Path,
    comprehension_of,
    parameters_of,
    variable_of,
)
from ._mutators import (
    MUTATING_NAMES,
    MUTATORS,
    NO_ALIASES,
    aliases_in,
    named_like_a_mutator,
    resolves_to_a_mutator,
)

__all__ = ["mutated_names", "mutated_paths"]


# Opcodes that write to a container they pop (and `BINARY_OP`, whose augmented
# forms do): code with none of them, and no name of a mutating method or
# function, mutates nothing, and is not read.
_WRITES: Final = frozenset(
    dis.opmap[name]
    for name in (
        "STORE_SUBSCR",
        "DELETE_SUBSCR",
        "STORE_SLICE",
        "DELETE_SLICE",
        "STORE_ATTR",
        "DELETE_ATTR",
    )
    if name in dis.opmap
)
_BINARY_OP: Final = dis.opmap["BINARY_OP"]
_NAMES: Final = MUTATORS | MUTATING_NAMES | ATTRIBUTE_STORES

# Keyed by `id(code)`, holding the code weakly (an entry is dropped with it):
# the names that may be a mutating function's alias (`aliases`), and for each
# set of aliases met, the code's mutations and the calls that may be.
_Paths: TypeAlias = dict[str, frozenset[Path]]
_Analysis: TypeAlias = tuple[_Paths, _Paths, tuple[Call, ...]]
_cache: dict[
    int,
    tuple[weakref.ref[types.CodeType], frozenset[str], dict[frozenset[str], _Analysis]],
] = {}
_lock = threading.Lock()
# What code's free variables hold that are cells of the code enclosing it,
# assigned a path there (`log = state['log']; def add(): log.append(v)`).
_Cells: TypeAlias = dict[str, frozenset[Source]]


def mutated_names(
    code: types.CodeType, namespace: Mapping[str, Any] | None = None
) -> frozenset[str]:
    """The variables (free variables and parameters) whose value `code`, or code
    nested in it, mutates in place (at any depth)."""
    return frozenset(mutated_paths(code, namespace))


def mutated_paths(
    code: types.CodeType,
    namespace: Mapping[str, Any] | None = None,
    *,
    named: bool = False,
    attributes: bool = False,
) -> dict[str, frozenset[Path]]:
    """For each variable (free variable or parameter) that `code`, or code nested
    in it, mutates through: the paths from its value to the containers mutated
    (`()` for the value itself).

    `namespace`: the globals the code runs in (`fn.__globals__`), which tell
    whether a call of `heappush`, `hq.heappush` or `push` is `heapq.heappush`
    (by the object the name is bound to); without it, a call of any function
    named like one of `MUTATING_FUNCTIONS` (or `list.append`, ...) counts, and
    no other name. `named`: with `namespace`, a call named like one counts
    too, whatever the name is bound to now (the replay's question: a global may
    be rebound after it is compiled). `attributes`: the paths of attribute
    stores too (ending in `SETATTR_STEP`: `m.calls = v` mutates `m`), which
    only a registered pytree node's refusal reads.
    """
    names, results = _entry(code)
    aliases = NO_ALIASES if namespace is None else aliases_in(names, namespace)
    found_paths = results.get(aliases)
    if found_paths is None:
        found_paths = _analysis(code, aliases, results)
    with_attributes, without, calls = found_paths
    paths = with_attributes if attributes else without
    if not calls:
        return paths
    found = {name: set(p) for name, p in paths.items()}
    for name, path, callee in calls:
        if (
            namespace is None
            or (named and named_like_a_mutator(callee))
            or resolves_to_a_mutator(callee, namespace)
        ):
            found.setdefault(name, set()).add(path)
    return {name: frozenset(p) for name, p in found.items()}


def _entry(
    code: types.CodeType,
) -> tuple[frozenset[str], dict[frozenset[str], _Analysis]]:
    """`code`'s cache entry: made on first sight (its names: see `aliases`)."""
    entry = _cache.get(id(code))
    if entry is not None and entry[0]() is code:
        return entry[1], entry[2]
    names: set[str] = set()
    todo = [code]
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        todo.extend(k for k in c.co_consts if type(k) is types.CodeType)
    key = id(code)

    def forget(_: object) -> None:
        with _lock:
            if (old := _cache.get(key)) is not None and old[0]() is None:
                del _cache[key]

    results: dict[frozenset[str], _Analysis] = {}
    new = (weakref.ref(code, forget), frozenset(names - _NAMES), results)
    with _lock:
        _cache[key] = new
    return new[1], new[2]


def _analysis(
    code: types.CodeType,
    aliases: frozenset[str],
    results: dict[frozenset[str], _Analysis],
) -> _Analysis:
    """`code`'s mutations, and the calls that may be, with the global names in
    `aliases` taken for mutating functions; kept in `results` (its cache
    entry's)."""
    found, calls = _scan(code, aliases)
    paths = {name: frozenset(p) for name, p in found.items()}
    without = {
        name: kept
        for name, p in paths.items()
        if (kept := frozenset(q for q in p if not q or q[-1][0] != SETATTR_STEP))
    }
    result = (paths, without, tuple(sorted(calls, key=repr)))
    with _lock:
        results[aliases] = result
    return result


def _scan(
    code: types.CodeType, aliases: frozenset[str]
) -> tuple[dict[str, set[Path]], set[Call]]:
    """Captured names `code` mutates through, with the paths, and the calls that
    may: its free variables and parameters (what lift captures as cells and
    defaults), and in nested code the free variables that are those, or that
    are cells of the enclosing code holding a path into one (`_Cells`), not
    the enclosing code's other locals."""
    found: dict[str, set[Path]] = {}
    calls: set[Call] = set()
    # What the iterator a comprehension's code is called with holds, by
    # `id(code)`: filled by the code defining it, followed before it.
    seeds: dict[int, set[Source]] = {}
    todo: list[tuple[types.CodeType, frozenset[str], _Cells]] = [
        (code, frozenset(code.co_freevars) | parameters_of(code), {})
    ]
    while todo:  # iteratively, nested code included
        c, captured, cells = todo.pop()
        seeded = seeds.pop(id(c), None)
        if seeded:
            captured |= {variable_of(s) for s in seeded}
        held: _Cells = {}  # what its own cells hold that nested code reads
        if captured and (
            _may_mutate(c, aliases) or _feeds(c, aliases) or _encloses(c, aliases)
        ):
            start = {".0": frozenset(seeded)} if seeded else None
            flow = Mutations(c, captured, aliases, found, calls, seeds, start, cells)
            for name in c.co_cellvars:
                paths = frozenset(
                    s for s in flow.locals.get(name, ()) if _captured(s, captured)
                )
                if paths:
                    held[name] = paths
        for k in c.co_consts:
            if type(k) is not types.CodeType:
                continue
            inner = {
                v: cells.get(v, frozenset()) | held.get(v, frozenset())
                for v in k.co_freevars
                if v in cells or v in held
            }
            through = {variable_of(s) for p in inner.values() for s in p}
            todo.append((k, (captured & frozenset(k.co_freevars)) | through, inner))
    return found, calls


def _captured(source: Source, captured: frozenset[str]) -> bool:
    """Whether `source` is a path into a captured variable, or what holds one's
    items."""
    if source[0] in VARIABLES:
        return source[1] in captured
    return source[0] in HOLDING and variable_of(source) in captured


def _encloses(code: types.CodeType, aliases: frozenset[str]) -> bool:
    """Whether `code` has cells that code nested in it reads and may mutate
    (`log = state['log']; def add(): log.append(v)`)."""
    if not code.co_cellvars:
        return False
    cells = frozenset(code.co_cellvars)
    return any(
        type(k) is types.CodeType
        and not cells.isdisjoint(k.co_freevars)
        and _mutates_within(k, aliases)
        for k in code.co_consts
    )


def _mutates_within(code: types.CodeType, aliases: frozenset[str]) -> bool:
    """Whether `code`, or code nested in it, may mutate."""
    return _may_mutate(code, aliases) or any(
        type(k) is types.CodeType and _mutates_within(k, aliases)
        for k in code.co_consts
    )


def _feeds(code: types.CodeType, aliases: frozenset[str]) -> bool:
    """Whether `code` defines a comprehension or a generator expression that
    may mutate (what it iterates, which `code` gives it)."""
    return any(
        type(k) is types.CodeType
        and comprehension_of(k)
        and (_may_mutate(k, aliases) or _feeds(k, aliases))
        for k in code.co_consts
    )


def _may_mutate(code: types.CodeType, aliases: frozenset[str] = NO_ALIASES) -> bool:
    """Whether `code` (not the code nested in it) has an instruction that
    `Mutations` records: read from its opcodes (every other byte of
    `co_code`) and names (with `aliases`, the globals bound to a mutating
    function)."""
    names = code.co_names
    if not _NAMES.isdisjoint(names) or (aliases and not aliases.isdisjoint(names)):
        return True
    if "getattr" in names and any(
        type(k) is str and k in MUTATORS for k in code.co_consts
    ):  # `getattr(x, "append")`
        return True
    raw = code.co_code
    opcodes = set(raw[::2])
    return not _WRITES.isdisjoint(opcodes) or (
        _BINARY_OP in opcodes
        and any(
            raw[k] == _BINARY_OP and raw[k + 1] >= 13 for k in range(0, len(raw), 2)
        )
    )  # (`BINARY_OP`'s augmented forms are 13 and up: `NB_INPLACE_ADD` ...)
