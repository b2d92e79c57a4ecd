"""What a code object tells, read once for every function that shares it.

Reading bytecode is slow: about a millisecond for an optax update function.
A sweep lifts fresh closures of code objects seen before. So the analysis runs
once per code object, kept in a bounded cache.
"""

from __future__ import annotations

import types
from typing import Any, Final, TypeAlias

from jax.tree_util import DictKey, SequenceKey

from .._base.caches import BoundedDict
from .._holders.labels import CELL, Label
from .._holders.trees import treedef_paths
from .flow import NONE_SOURCE, Flow, Source

# The keys a branch reads a capture at (`config["anneal"]`: `("anneal",)`).
Branches: TypeAlias = frozenset[tuple[Any, ...]]
NO_BRANCH: Final[Branches] = frozenset()
WHOLE: Final[Branches] = frozenset({()})


def branch_hits(branches: Branches, treedef: Any, count: int) -> list[bool]:
    """For each of a capture's `count` leaves, whether a branch reads it.

    A branch reads a leaf when its keys lead there, as far as both go.
    `config["a"]` reads `config["a"]["b"]`, not `config["lr"]`. A key JAX
    names otherwise (an attribute, a node's position) counts as read.
    """
    if not branches or treedef is None or () in branches:
        return [bool(branches)] * count
    return [
        any(all(map(_same, path, keys)) for keys in branches)
        for path in treedef_paths(treedef)
    ]


def _same(key: Any, wanted: Any) -> bool:
    if type(key) is DictKey:
        return key.key == wanted
    return key.idx == wanted if type(key) is SequenceKey else True


class CodeInfo:
    """Facts about one code object that `lift` needs on every capture.

    Variables are told apart by scope, not by name. A comprehension's variable
    is not a capture of that name (on 3.12+ it is a local, PEP 709). Nor is a
    nested function's own local.

    Attributes:
        code: the code object.
        hash: `hash(code)`, computed once (CPython recomputes it on every call).
        cell_labels: the `Label` of each cell, in cell order.
        rebound: free variables the code rebinds (`nonlocal x; x = ...`), here
            or in a function defined inside it that shares the variable. A
            Python scalar there stays static.
        branched: free variables whose value feeds Python control flow
            (`if b2 != 1.0:`, `while lr > 0`, `not mask`, `lo < x < hi`), here
            or in a function defined inside this one that shares the variable.
            A float capture used this way cannot be traced: it stays static.
        branch_paths: for each branched variable, the keys each branch reads
            it at (`()`: the whole value; `("anneal",)`: `config["anneal"]`).
        branch_sites: for each branched variable, the `(filename, line)` of the
            first such branch.
        global_names: the names the code (and code nested in it) looks up as
            globals or attributes (`co_names`).
        branches_on_params: whether this code, or code defined inside it,
            branches in Python on one of its own parameters (optax's `masked`
            maps `lambda m, p: p if m else ...` over its captured mask). A
            boolean NumPy capture of a graph with such code is kept static: it
            may flow there.
    """

    __slots__ = (
        "_operands",
        "branch_paths",
        "branch_sites",
        "branched",
        "branches_on_params",
        "cell_labels",
        "code",
        "global_names",
        "hash",
        "rebound",
        "unplain",
    )

    def __init__(self, code: types.CodeType) -> None:
        self.code = code
        self.hash = hash(code)
        self.cell_labels = tuple(Label.of(CELL, name) for name in code.co_freevars)
        rebound: set[str] = set()
        sites: dict[str, tuple[str, int]] = {}
        paths: dict[str, set[tuple[Any, ...]]] = {}
        flows = False
        names: set[str] = set()
        # Every code object defined inside this one, each with the names of its
        # free variables that are this code's free variables (resolved scope by
        # scope: a nested function's own local ends the chain).
        stack: list[tuple[types.CodeType, dict[str, str]]] = [
            (code, {n: n for n in code.co_freevars})
        ]
        while stack:
            c, outer = stack.pop()
            names.update(c.co_names)
            scan = Flow(c)
            flows = flows or bool(scan.param_branches)
            rebound.update(outer[n] for n in scan.stores if n in outer)
            for (name, *keys), line in scan.free_branches.items():
                if name in outer:
                    sites.setdefault(outer[name], (c.co_filename, line))
                    paths.setdefault(outer[name], set()).add(tuple(keys))
            # A nested code's free variable `n` is `c`'s cell `n`: `c`'s own
            # local when `c` binds it, else `c`'s free variable.
            own = (set(c.co_cellvars) | set(c.co_varnames)) - set(c.co_freevars)
            shared = {n: name for n, name in outer.items() if n not in own}
            for k in c.co_consts:
                if isinstance(k, types.CodeType):
                    inner = {n: shared[n] for n in k.co_freevars if n in shared}
                    stack.append((k, inner))
        self.rebound = frozenset(rebound)
        self.branched = frozenset(sites)
        self.branch_paths = {n: frozenset(p) for n, p in paths.items()}
        self.branch_sites = sites
        # Variables whose capture needs more than its type read: one of both.
        self.unplain = self.branched | self.rebound
        self.global_names = frozenset(names)
        self.branches_on_params = flows
        self._operands: dict[int, frozenset[Source]] | None = None

    def rebinds(self, name: Any) -> str | None:
        """Why a scalar `name` is static when the code rebinds it; else `None`.

        `repr` and `lift.diff` say it alike."""
        if name not in self.rebound:
            return None
        return f"the code rebinds it (`nonlocal {name}`): a leaf cannot be rebound"

    # Compared by code value (two lambdas differing in a constant differ),
    # hashed by the hash computed once: the code's part of a skeleton's key.
    def __eq__(self, other: object) -> bool:
        if type(other) is not CodeInfo:
            return False
        return self is other or (self.hash == other.hash and self.code == other.code)

    def __hash__(self) -> int:
        return self.hash

    def operands(self, offset: int) -> frozenset[Source]:
        """The variables the operands at `offset` were computed from.

        Calls count too: `if positive(lr):`, `int(n)`, `jnp.zeros((n,))`. An
        error raised there can be blamed on these captures. Read on first
        use (an error's diagnosis), then kept.
        """
        operands = self._operands
        if operands is None:
            operands = self._operands = Flow(self.code, through_calls=True).operands
        return operands.get(offset, NONE_SOURCE)


# Keyed by `id(code)`: an entry holds its code, so the id is not reused while
# the entry lives.
_cache: BoundedDict[int, CodeInfo] = BoundedDict(512)


def code_info(code: types.CodeType) -> CodeInfo:
    """The cached `CodeInfo` of `code` (computed on first sight)."""
    info = _cache.get(id(code))
    if info is None:
        info = _cache.add(id(code), CodeInfo(code))
    return info
