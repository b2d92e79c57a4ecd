"""Finding leaks: `lift.find_leaks` and `lift.check_leaks` over the given
roots.

Each runs the leak scan (`lift._leaks.scan`) and names what it finds
(`lift._leaks.report`)."""

from __future__ import annotations

from typing import Any

from .._base.errors import LeakError
from .report import Leaks, Unopened, format_leaks, root_label
from .scan import DEFAULT_LIMIT, scan_tracers


def find_leaks(*roots: Any, limit: int = DEFAULT_LIMIT) -> Leaks:
    """Every tracer reachable from `roots` whose transform has already exited.

    **Arguments:**

    - `*roots`: anything: functions, `Lifted`, pytrees, objects, modules.
    - `limit`: the most objects one scan visits; a graph larger than that is
      scanned only in part (breadth-first, so the closest objects first).

    **Returns:**

    A list of [`lift.Leak`][], one per escaped tracer, in breadth-first order.
    Tracers of transforms still running (a scan from inside `jit`) are not leaks.

    ```python
    import jax
    import lift

    STASH = []

    @jax.jit
    def step(x):
        STASH.append(x)
        return x * 2

    step(1.0)
    (leak,) = lift.find_leaks(step)
    print(leak.path, leak.variable, leak.tracer)
    ```

    ```text
    STASH[0] STASH float32[] from jit(step)
    ```

    Some objects the scan cannot look inside: an attribute, `__dict__` or
    iteration raises. Each is named in the result's `unopened`, with its path
    and error (`could not open roots[0].__dict__: RuntimeError: …`).
    """
    # A tracer two roots reach at the same depth is named from the one first
    # in an order of the roots themselves, never of the arguments: named
    # roots by name, then the others by type; alike, by identity.
    named = sorted(
        ((root_label(root, i), root) for i, root in enumerate(roots)),
        key=_root_order,
    )
    unopened: list[Unopened] = []
    leaks = Leaks(scan_tracers(named, limit, unopened=unopened)[0])
    leaks.unopened = tuple(dict.fromkeys(unopened))
    return leaks


def _root_order(pair: tuple[str, Any]) -> tuple[bool, str, int]:
    label, root = pair
    unnamed = label.startswith("roots[")
    return unnamed, type(root).__qualname__ if unnamed else label, id(root)


def check_leaks(*roots: Any, limit: int = DEFAULT_LIMIT) -> None:
    """Raise [`lift.LeakError`][] if a tracer reachable from `roots` has escaped.

    **Arguments:** as [`lift.find_leaks`][].

    **Returns:** `None` when nothing escaped.

    **Raises:** `lift.LeakError`, listing each leak with its function,
    `file:line`, variable and the fix. It then lists what the scan could not
    open; with no leak, `find_leaks(...).unopened` names that.

    ```python
    import jax
    import lift

    lift.check_leaks(jax.numpy.ones(3), lambda x: x)  # nothing escaped: no error
    ```
    """
    __tracebackhide__ = True
    leaks = find_leaks(*roots, limit=limit)
    if leaks:
        raise LeakError(format_leaks(leaks, leaks.unopened), anchor="leak-report")
