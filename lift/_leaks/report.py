"""The leak report: what one escaped tracer is called in a `LeakError`.

A `Leak` names the holder: a module global, a registry key, an attribute
path. It names the function, its variable and `file:line`. It gives the
tracer's type and transform, and advice that fits how it is kept.
`Unopened` names what a scan could not look inside. `format_leaks` is a
`LeakError`'s text."""

from __future__ import annotations

import contextlib
import dataclasses
import types
from collections.abc import Iterable
from typing import Any, NamedTuple, cast

from .. import _compat
from .._base.errors import code_of
from .._holders.closure import function_of, user_class
from .._holders.labels import Label

CAPTURED = "captured variable"
GLOBAL = "global variable"
BOUND = "bound object"
PARTIAL = "partial argument"
FRAME_LOCAL = "local variable"  # of a running frame, when a trace exited
STORED_LIFTED = "lifted function"
STATIC_FIELD = "static pytree data"


MODULE_GLOBAL = "module global"  # a module's variable, a module given as root

ABSENT: Any = object()
STORED = frozenset({STORED_LIFTED, STATIC_FIELD})  # holders already pytrees
MARKERS = STORED | {MODULE_GLOBAL}  # edges that name no holding function
REGISTRIES = frozenset({GLOBAL, MODULE_GLOBAL})  # module-level storage


def stored_advice(holder: Any, how: str | None) -> str:
    """Advice for a tracer whose holder is already a pytree's own data."""
    if how == STORED_LIFTED:
        name = getattr(holder, "__qualname__", None) or "the function"
        return (
            f"{name} is already lifted (its captures are traced), but it was "
            "stored where it outlives the transform: return it from the "
            "transformed function instead of storing it"
        )
    return (
        f"static data of {type(holder).__qualname__} is not traced: return the "
        "value from the transformed function instead of storing it in a static "
        "field, or make the field a pytree node"
    )


@dataclasses.dataclass(frozen=True)
class Leak:
    """A tracer reachable from the scanned roots after its transform has exited.

    **Attributes:**

    - `path`: how the tracer is reached, from the root, e.g. `STASH[0].x`.
    - `function`: qualified name of the innermost function holding the
      tracer, or `None`. It holds it through a captured variable, a default,
      a bound object, a partial argument, or a global its code names.
    - `variable`: the name under which that function holds it, or `None`.
    - `filename`, `lineno`: where that function is defined, or `None`.
    - `tracer`: shape, dtype and transform of the tracer: `float32[] from jit(step)`.
    - `kind`: how the function holds it (`"captured variable"`, `"default of
      parameter"`, `"global variable"`, `"bound object"`, `"partial argument"`),
      or `None`.
    - `location`: the path to the holding function, or `None` when it is the root.

    `str(leak)` is the one-line report, with the fix.

    ```python
    import jax
    import lift

    def make(x):
        def scaled(y):
            return x * y

        return scaled

    saved = []
    jax.jit(lambda x: saved.append(make(x)) or x)(1.0)
    (leak,) = lift.find_leaks(saved)
    print(leak.function, leak.variable, leak.tracer)
    ```

    ```text
    make.<locals>.scaled x float32[] from jit(<lambda>)
    ```
    """

    path: str
    function: str | None
    variable: str | None
    filename: str | None
    lineno: int | None
    tracer: str
    kind: str | None = None
    location: str | None = None
    detail: str | None = None
    advice: str | None = None

    @property
    def hint(self) -> str:
        """What to do about this leak, as code where possible."""
        if self.advice is not None:
            return self.advice
        return _HINTS.get(self.kind, _RETURN_IT).format(var=self.variable)

    def __str__(self) -> str:
        if self.function is None:
            return f"{self.path}: {self.tracer} — {self.hint}"
        where = f"{self.function} ({self.filename}:{self.lineno})"
        if self.kind == GLOBAL:
            return (
                f"{self.path}: {self.tracer}, in global '{self.variable}' used by "
                f"{where} — {self.hint}"
            )
        at = f" at {self.detail}" if self.detail else ""
        head = f"{self.location} -> " if self.location else ""
        return (
            f"{head}{where}, {self.kind} '{self.variable}'{at}: {self.tracer} — "
            f"{self.hint}"
        )


_RETURN_IT = "return the value from the transformed function instead of storing it"
# What to do about a leak, by how the function holds the tracer.
_HINTS: dict[str | None, str] = {
    CAPTURED: "lift the function or pass {var} as an argument",
    "function attribute": "lift the function or pass {var} as an argument",
    "default of parameter": "pass {var} as an argument instead of a default value",
    GLOBAL: f"{_RETURN_IT} in {{var}}",
    BOUND: "lift the method (`lift.lift(obj.method)`) or pass obj as an argument",
    PARTIAL: "lift the partial (`lift.lift(p)`) or pass {var} as an argument",
    FRAME_LOCAL: "return the value from the transformed function instead of "
    "keeping it in {var}, which outlives the transform",
}


class Unopened(NamedTuple):
    """A holder the scan could not look inside: a tracer there is not seen.

    `path`: how it is reached from the root (`state.model`); `error`: what
    opening it raised (`RuntimeError: no dict`)."""

    path: str
    error: str

    def __str__(self) -> str:
        return f"could not open {self.path}: {self.error}"


def error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 200 else f"{text[:199]}…"


def unopened_text(unopened: Iterable[Unopened]) -> str:
    """The lines naming what a scan could not open (empty when nothing)."""
    items = list(dict.fromkeys(unopened))
    if not items:
        return ""
    lines = [f"  {u}" for u in items[:_UNOPENED_SHOWN]]
    if len(items) > _UNOPENED_SHOWN:
        lines.append(f"  (and {len(items) - _UNOPENED_SHOWN} more)")
    return (
        f"{len(items)} holder(s) could not be opened, so a tracer inside "
        "is not seen (make the attribute readable, or scan its parts "
        "yourself):\n" + "\n".join(lines)
    )


class Leaks(list[Leak]):
    """What `find_leaks` returns: a list of [`lift.Leak`][], and `unopened`.

    `unopened` lists the holders the scan could not open; a tracer inside
    them is not seen. Each comes with its path and the error opening it
    raised.

    ```python
    import lift

    class Guarded:
        @property
        def __dict__(self):
            raise RuntimeError("locked")

    found = lift.find_leaks(Guarded())
    assert isinstance(found, lift.Leaks) and found == []
    print(len(found.unopened))
    ```

    ```text
    1
    ```
    """

    unopened: tuple[Unopened, ...] = ()


_UNSEEN_HOLDER = (
    "held by no variable lift can see: by JAX (a returned pytree's static "
    "data) or a C extension (atexit)"
)


def closure_leak(fn: types.FunctionType, variable: str, tracer: Any) -> Leak:
    code = fn.__code__
    return Leak(
        f"<{_UNSEEN_HOLDER}>",
        fn.__qualname__,
        variable,
        code.co_filename,
        code.co_firstlineno,
        tracer_text(tracer),
        CAPTURED,
        f"<{_UNSEEN_HOLDER}>",
        None,
        "return the value from the transformed function instead of keeping a "
        "closure over it (a static field of a returned pytree is not traced: "
        "make it a pytree node)",
    )


def format_leaks(leaks: Iterable[Leak], unopened: Iterable[Unopened] = ()) -> str:
    """The text of a `LeakError`: one line per leak, then what the scan could
    not open (where another tracer may be)."""
    lines = [f"\n  {leak}" for leak in leaks]
    what = "tracer escaped the transform that created it"
    if len(lines) != 1:
        what = "tracers escaped the transforms that created them"
    more = unopened_text(unopened)
    return f"{len(lines)} {what}:{''.join(lines)}" + (f"\n{more}" if more else "")


def root_label(root: Any, index: int) -> str:
    kind: type[Any] = type(root)  # pyright: ignore[reportUnknownVariableType]
    if issubclass(kind, types.ModuleType):
        return root.__name__
    if kind is types.FunctionType or function_of(root) is not None:
        return getattr(root, "__qualname__", f"roots[{index}]")
    return f"roots[{index}]"


def local_leak(code: types.CodeType, name: str, tracer: Any) -> Leak:
    """A tracer a frame's local `name` held when its trace exited."""
    return Leak(
        f"<inside {name}>",
        code.co_qualname,
        name,
        code.co_filename,
        code.co_firstlineno,
        tracer_text(tracer),
        FRAME_LOCAL,
    )


def tracer_text(tracer: Any) -> str:
    """`float32[] from jit(step)`: a tracer's shape, dtype and transform."""
    return f"{_compat.tracer_aval(tracer)} from {_compat.transform_name(tracer)}"


#: At most this many unopened holders are listed in one report.
_UNOPENED_SHOWN = 5


# -- a scan's path to a leak ---------------------------------------------------------

# A label as a scan stores it: text, `(format, key)` (rendered only for a
# report), or a `Label`.
PathLabel = str | tuple[str, Any] | Label


def label_text(label: PathLabel) -> str:
    if isinstance(label, str):
        return label
    if isinstance(label, Label):
        return label.text
    fmt, key = label
    if "{!r}" in fmt:
        return fmt.replace("{!r}", "{}").format(safe_repr(key))
    return fmt.format(key)


def safe_repr(obj: Any) -> str:
    """`repr(obj)` where no code of the user's runs for it; else its type and
    id (`<Key object at 0x…>`).

    Such reprs are the builtins' and the standard library's, and tuples of
    such. A report never runs, or fails on, a user's `__repr__`."""
    cls: type[Any] = type(obj)  # pyright: ignore[reportUnknownVariableType]
    if cls is tuple:
        inner = ", ".join(map(safe_repr, cast(tuple[Any, ...], obj)))
        return f"({inner},)" if len(obj) == 1 else f"({inner})"
    owner = next((k for k in cls.__mro__ if "__repr__" in vars(k)), object)
    if not user_class(owner):  # the builtins', the libraries' (lift's, NumPy's)
        with contextlib.suppress(Exception):  # one reading a broken attribute
            return repr(obj)
    return f"<{cls.__module__}.{cls.__qualname__} object at {id(obj):#x}>"


def chain_to(entries: list[Any], index: int) -> list[int]:
    """The entries from a root to entry `index`."""
    out: list[int] = []
    while index >= 0:
        out.append(index)
        index = entries[index][0]
    out.reverse()
    return out


def path_text(entries: list[Any], chain: list[int], home: str | None) -> str:
    """The path a chain of entries spells, from its last module-level holder."""
    start = max((i for i, e in enumerate(chain) if entries[e][3]), default=0)
    text = "".join(label_text(entries[e][1]) for e in chain[start:])
    return _module_of(entries, chain, start, home) + text


def _module_of(
    entries: list[Any], chain: list[int], start: int, home: str | None
) -> str:
    """`mylib.` when the path starts at a global of a module other than the
    one whose code reached it; else nothing.

    A library's registry seen from a test is such a global. The report then
    names the module holding it."""
    _, label, edge, _ = entries[chain[start]]
    if (
        edge is None
        or edge[2] != GLOBAL
        or type(label) is not str
        or "." in label
        or type(edge[0]) is not types.FunctionType
    ):
        return ""
    module = edge[0].__module__
    if home is not None:
        return "" if module == home else f"{module}."
    before = [entries[e][2] for e in chain[:start]]
    crossed = any(
        b is not None and type(b[0]) is types.FunctionType and b[0].__module__ != module
        for b in before
    )
    return f"{module}." if crossed else ""


def _qualname(fn: Any) -> str:
    """`fn`'s qualified name, or its type's (a proxy whose attributes fail)."""
    name = None
    with contextlib.suppress(Exception):
        name = getattr(fn, "__qualname__", None)
    return name if isinstance(name, str) else type(fn).__qualname__


def leak_at(entries: list[Any], home: str | None, tracer: Any, index: int) -> Leak:
    """The report of `tracer`, found at entry `index` of a scan's `entries`
    (`(parent, label, edge, resets)`, one per object visited)."""
    chain = chain_to(entries, index)
    path = path_text(entries, chain, home)
    description = tracer_text(tracer)
    edges = [entries[e][2] for e in chain]
    holder = max(
        (i for i, e in enumerate(edges) if e is not None and e[2] not in MARKERS),
        default=None,
    )
    stored = next((e for e in edges[:holder] if e is not None and e[2] in STORED), None)
    if holder is None:
        advice = None if stored is None else stored_advice(stored[0], stored[2])
        return Leak(path, None, None, None, None, description, advice=advice)
    fn, variable, kind = edges[holder]
    # A bound `lift.jit` method's function: the code it wraps.
    code = fn if isinstance(fn, types.CodeType) else code_of(fn, shown=True)
    qualname = fn.co_qualname if isinstance(fn, types.CodeType) else _qualname(fn)
    filename, lineno = (code.co_filename, code.co_firstlineno) if code else (None, None)
    location = path_text(entries, chain[:holder], home) if holder else None
    location = location if location and location != qualname else None
    rest = "".join(label_text(entries[e][1]) for e in chain[holder + 1 :])
    detail = f"{variable}{rest}" if rest else None
    advice = None
    if stored is not None and kind != GLOBAL:
        advice = stored_advice(stored[0], stored[2])
    elif (
        kind != GLOBAL
        and location is not None
        and any(e is not None and e[2] in REGISTRIES for e in edges[:holder])
    ):
        # A closure kept in a registry (a module's list or dict, a class
        # attribute): lifting it would still store it there.
        advice = (
            "return the value from the transformed function instead of "
            f"storing {qualname} in {location}"
        )
    if _compat.is_jax_closure_convert(fn):
        advice = (
            "jax.closure_convert keeps integer, boolean and key tracers in its "
            "closure: convert with lift.closure_convert(f, *example_args) instead"
        )
    return Leak(
        path,
        qualname,
        variable,
        filename,
        lineno,
        description,
        kind,
        location,
        detail,
        advice,
    )
