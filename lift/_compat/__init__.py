"""Everything `lift` knows about JAX's internals, in one place.

Nothing else in `lift` imports `jax._src`, reads JAX's private attributes or
parses JAX's messages. Each use here is marked with the JAX versions it was
written against. `tests/compat/test_compat.py` pins each on the oldest and
newest JAX. One module per subsystem of JAX that lift reads:

- `traces`: tracers and traces (the transform a tracer belongs to, whether its
  trace still runs) and the JAX version facts the others read;
- `programs`: traced programs (a jaxpr's constants, `jax.jit`'s inferred
  options, the Python code a jaxpr's parameters run);
- `checker`: JAX's own leak checker (the tracers its report carries, the
  frames' locals snapshots it takes for leaks);
- `trace_exits`: the traces that exit inside `lift.checking_leaks()`,
  whether JAX's checker looks at them, and its verdict where it does
  (`LeakSignal`), with the tracers that are the trace's own;
- `escaped`: which of those traces still have tracers alive after the block,
  and JAX's criterion at its check (`leaked_at_check`);
- `stack`: tracebacks and the stack (JAX's filtering, warnings' stack level,
  `jax.jit` hashing a static argument);
- `config`: JAX's configuration, read fast;
- `messages`: JAX's messages and reprs, where lift must read their words.

The rest of `lift` imports from this package, never from its modules.
"""

from __future__ import annotations

from .checker import (
    is_leak_report as is_leak_report,
    jax_leaked_tracers as jax_leaked_tracers,
    snapshots_are_not_leaks as snapshots_are_not_leaks,
)
from .config import (
    DEFAULT_DEVICE as DEFAULT_DEVICE,
    X64 as X64,
    jax_checks_leaks as jax_checks_leaks,
)
from .escaped import (
    escaped_tracers as escaped_tracers,
    noting_promotions as noting_promotions,
)
from .messages import (
    asks_for_a_concrete_value as asks_for_a_concrete_value,
    bad_argument as bad_argument,
    concretized_arguments as concretized_arguments,
    has_custom_nodes as has_custom_nodes,
    is_signature_mismatch as is_signature_mismatch,
    is_unhashable_static as is_unhashable_static,
    leaked_tracer_text as leaked_tracer_text,
    number_method as number_method,
    tracer_use as tracer_use,
    treedef_text as treedef_text,
)
from .programs import (
    bare_jaxpr as bare_jaxpr,
    callbacks_alive as callbacks_alive,
    holds_consts as holds_consts,
    inferred_argnames as inferred_argnames,
    kept_callbacks as kept_callbacks,
    rule_parts as rule_parts,
    runs_code as runs_code,
)
from .stack import (
    entry_point as entry_point,
    filter_traceback as filter_traceback,
    filtering_mode as filtering_mode,
    full_tracebacks as full_tracebacks,
    hashed_as_jit_static as hashed_as_jit_static,
    hide_frames_of as hide_frames_of,
    user_frames as user_frames,
    user_stacklevel as user_stacklevel,
)
from .trace_exits import (
    CHECKED_HERE as CHECKED_HERE,
    ExitedTrace as ExitedTrace,
    LeakSignal as LeakSignal,
    jax_checks as jax_checks,
    watching_trace_exits as watching_trace_exits,
)
from .traces import (
    CUSTOM_NODES as CUSTOM_NODES,
    JAX_CHECKS_EAGER_GRAD as JAX_CHECKS_EAGER_GRAD,
    JAX_ISSUE_26560 as JAX_ISSUE_26560,
    JAX_VERSION as JAX_VERSION,
    SNAPSHOT_LOCALS as SNAPSHOT_LOCALS,
    LiveTraces as LiveTraces,
    Tracer as Tracer,
    eager as eager,
    frame_locals as frame_locals,
    is_jax_closure_convert as is_jax_closure_convert,
    is_tracer as is_tracer,
    live_traces as live_traces,
    running_traces as running_traces,
    tracer_aval as tracer_aval,
    transform_name as transform_name,
    valid_jaxtype as valid_jaxtype,
)
