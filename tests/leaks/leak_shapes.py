"""Leak shapes JAX's checker fails that a verdict made by looking in a list
of places passed: holders emptied before the phase ends, holders lift did
not open, and leaks outside a test's call. Each is a small project for
`test_plugin_agrees_with_jax` (one test per file), with the word its report
must show: the holder's name, or where it names none, the referrer chain.
"""

from __future__ import annotations

from typing import NamedTuple


class Case(NamedTuple):
    name: str
    files: dict[str, str]  # file name -> source (a `test_*.py` is one test)
    shows: str = ""  # a word the default mode's report holds


# -- holders emptied later in the test: module globals -------------------------------

GLOBALS = (
    # A `@jax.jit` function at module level stores in a global the test empties.
    Case(
        "jit_decorated_global",
        {
            "lib_jit_decorated_global.py": """
                import jax
                SEEN = []
                @jax.jit
                def step(x):
                    SEEN.append(x)
                    return x * 2
            """,
            "test_jit_decorated_global.py": """
                import lib_jit_decorated_global as lib
                def test_it():
                    lib.step(1.0)
                    lib.SEEN.clear()
            """,
        },
        "SEEN",
    ),
    # A project's `step = jax.jit(_impl)`.
    Case(
        "jit_of_impl_global",
        {
            "lib_jit_of_impl_global.py": """
                import jax
                LAST = {}
                def _impl(x):
                    LAST["x"] = x
                    return x + 1
                step = jax.jit(_impl)
            """,
            "test_jit_of_impl_global.py": """
                import lib_jit_of_impl_global as lib
                def test_it():
                    lib.step(1.0)
                    lib.LAST.clear()
            """,
        },
        "LAST",
    ),
    # A module-level closure over a list the module exposes.
    Case(
        "module_closure_global",
        {
            "lib_module_closure_global.py": """
                import jax
                def _make():
                    buf = []
                    def traced(x):
                        buf.append(x)
                        return x
                    return traced, buf
                TRACED, BUF = _make()
            """,
            "test_module_closure_global.py": """
                import jax
                import lib_module_closure_global as lib
                def test_it():
                    jax.jit(lib.TRACED)(1.0)
                    lib.BUF.clear()
            """,
        },
        "BUF",
    ),
    # A list an `lru_cache` returns, the cache cleared in the test.
    Case(
        "lru_cache_cleared",
        {
            "lib_lru_cache_cleared.py": """
                import functools, jax
                @functools.lru_cache(maxsize=None)
                def registry():
                    return []
                def step(x):
                    def traced(x):
                        registry().append(x)
                        return x
                    return jax.jit(traced)(x)
            """,
            "test_lru_cache_cleared.py": """
                import lib_lru_cache_cleared as lib
                def test_it():
                    lib.step(1.0)
                    lib.registry.cache_clear()
            """,
        },
        "registry",
    ),
)

# -- classes: an attribute, a method's cache --------------------------------------

CLASSES = (
    Case(
        "class_attribute_reset",
        {
            "test_class_attribute_reset.py": """
                import jax
                class Config:
                    last = None
                def test_it():
                    def f(x):
                        Config.last = x
                        return x
                    jax.jit(f)(1.0)
                    Config.last = None
            """
        },
        "last",
    ),
    Case(
        "method_cache_cleared",
        {
            "lib_method_cache_cleared.py": """
                import functools
                class Model:
                    @functools.cache
                    def buffer(self):
                        return []
                MODEL = Model()
            """,
            "test_method_cache_cleared.py": """
                import jax
                import lib_method_cache_cleared as lib
                def test_it():
                    def f(x):
                        lib.MODEL.buffer().append(x)
                        return x
                    jax.jit(f)(1.0)
                    lib.Model.buffer.cache_clear()
            """,
        },
        "buffer",
    ),
)

# -- callbacks and custom rules closing over a traced value ---------------------------

CALLBACKS = (
    Case(
        "debug_callback_local_step",
        {
            "test_debug_callback_local_step.py": """
                import jax
                def test_it():
                    def step(x):
                        y = x * 2
                        jax.debug.callback(lambda: print(y))
                        return y
                    jax.jit(step)(1.0)
            """
        },
        "y",
    ),
    Case(
        "debug_callback_module_step",
        {
            "lib_debug_callback_module_step.py": """
                import jax
                @jax.jit
                def step(x):
                    y = x * 2
                    jax.debug.callback(lambda: print(y))
                    return y
            """,
            "test_debug_callback_module_step.py": """
                import lib_debug_callback_module_step as lib
                def test_it():
                    lib.step(1.0)
            """,
        },
        "y",
    ),
    Case(
        "custom_jvp_rule_kept",
        {
            "test_custom_jvp_rule_kept.py": """
                import jax
                def test_it():
                    rules = {}
                    def f(x):
                        @jax.custom_jvp
                        def g(y):
                            return y * 2
                        g.defjvp(lambda p, t: (g(*p), t[0] * x))
                        rules["g"] = g
                        return g(x)
                    jax.jit(f)(1.0)
            """
        },
        "rules",
    ),
    Case(
        "custom_vjp_rule_kept",
        {
            "test_custom_vjp_rule_kept.py": """
                import jax
                def test_it():
                    rules = {}
                    def f(x):
                        @jax.custom_vjp
                        def g(y):
                            return y * 2
                        g.defvjp(lambda y: (y * 2, None), lambda r, c: (c * x,))
                        rules["g"] = g
                        return g(x)
                    jax.jit(f)(1.0)
            """
        },
        "rules",
    ),
)

# -- objects lift did not open ----------------------------------------------------------

OBJECTS = (
    Case(
        "traceback_kept",
        {
            "test_traceback_kept.py": """
                import jax
                def test_it():
                    tbs = []
                    def f(x):
                        try:
                            raise ValueError("kept")
                        except ValueError as e:
                            tbs.append(e.__traceback__)
                        return x
                    jax.jit(f)(1.0)
            """
        },
        "tbs",
    ),
    Case(
        "frame_kept",
        {
            "test_frame_kept.py": """
                import sys, jax
                def test_it():
                    frames = []
                    def f(x):
                        frames.append(sys._getframe())
                        return x
                    jax.jit(f)(1.0)
            """
        },
        "frames",
    ),
    Case(
        "slice_kept",
        {
            "test_slice_kept.py": """
                import jax
                def test_it():
                    cuts = []
                    def f(x):
                        cuts.append(slice(x, None))
                        return x
                    jax.jit(f)(1.0)
            """
        },
        "cuts",
    ),
    # A log record pytest's log capture keeps (its handler's `records`).
    Case(
        "log_record_kept",
        {
            "test_log_record_kept.py": """
                import logging, jax
                def test_it():
                    def f(x):
                        logging.getLogger("leaky").warning("value %s", x)
                        return x
                    jax.jit(f)(1.0)
            """
        },
        "record",
    ),
)

# -- outside a test's call --------------------------------------------------------------

ELSEWHERE = (
    # A leak while the test module is imported: JAX errors the collection.
    Case(
        "import_time",
        {
            "test_import_time.py": """
                import jax
                _KEPT = []
                jax.jit(lambda x: (_KEPT.append(x), x)[1])(1.0)
                _KEPT.clear()
                def test_it():
                    pass
            """
        },
        "_KEPT",
    ),
    # A `unittest.TestCase` method.
    Case(
        "unittest_case",
        {
            "test_unittest_case.py": """
                import unittest, jax
                class TestStep(unittest.TestCase):
                    def test_it(self):
                        kept = []
                        jax.jit(lambda x: (kept.append(x), x)[1])(1.0)
                        kept.clear()
            """
        },
        "kept",
    ),
)

# The cases whose test module fails its collection.
IMPORTED = ELSEWHERE[:1]

SHAPES = GLOBALS + CLASSES + CALLBACKS + OBJECTS + ELSEWHERE

# -- what JAX's checker passes ------------------------------------------------------

CLEAN = (
    # `jax.grad` over `eqx.filter_jit` of a closure over the grad's tracer:
    # JAX's own caches keep the closure (and its tracer); no leak.
    Case(
        "eqx_grad_over_filter_jit_closure",
        {
            "test_eqx_grad_over_filter_jit_closure.py": """
                import equinox as eqx, jax, jax.numpy as jnp
                def test_it():
                    def loss(w):
                        @eqx.filter_jit
                        def inner(x):
                            return jnp.sum(w * x)
                        return inner(jnp.ones(2))
                    assert jax.grad(loss)(jnp.ones(2)).shape == (2,)
            """
        },
    ),
    # An `eqx.nn.MLP` under `jax.vmap`: its activations are `custom_jvp`
    # functions, batched in traces of their own that no JAX check follows.
    # The frames those traces exited under return before the vmap's check,
    # their locals holding the vmap's tracers; lift's look at those exits
    # kept them alive there (jax 0.8.0 and 0.10.2).
    Case(
        "eqx_vmapped_mlp",
        {
            "test_eqx_vmapped_mlp.py": """
                import equinox as eqx, jax, jax.numpy as jnp
                def test_it():
                    model = eqx.nn.MLP(2, 1, 4, 1, key=jax.random.key(0))
                    assert jax.vmap(model)(jnp.ones((3, 2))).shape == (3, 1)
            """
        },
    ),
    # equinox's own `test_vmap`: `eqx.error_if` under `jax.vmap`, and its
    # error raised from the vmapped function.
    Case(
        "eqx_vmapped_error_if",
        {
            "test_eqx_vmapped_error_if.py": """
                import equinox as eqx, jax, jax.numpy as jnp, pytest
                def f(x):
                    return jax.nn.relu(eqx.error_if(x, x < 0, "negative"))
                def test_it():
                    vf = jax.vmap(f)
                    vf(jnp.array([1.0, 1.0]))
                    jax.jit(vf)(jnp.array([1.0, 1.0]))
                    with pytest.raises((ValueError, RuntimeError)):
                        vf(jnp.array([1.0, -1.0]))
            """
        },
    ),
)

# -- a forward-mode tracer kept a while by an eager transform ------------------------

# JAX's checker looks at no eager `jvp` or `linearize` trace, nor, before jax
# 0.11, at an eager `grad`'s: each of these tests, whose tracer is dropped
# before the test ends, passes under it at jax 0.8.0 and 0.10.2. The default
# mode's verdict is JAX's: where JAX checks the trace, a kept tracer fails
# both; where it does not, both pass (a tracer still alive after the phase
# fails the default mode only).
EAGER = (
    Case(
        "eager_jvp_local",
        {
            "test_eager_jvp_local.py": """
                import jax
                def test_it():
                    kept = []
                    def f(x):
                        kept.append(x)
                        return x * 2
                    jax.jvp(f, (1.0,), (1.0,))
                    kept.clear()
            """
        },
    ),
    Case(
        "eager_linearize_local",
        {
            "test_eager_linearize_local.py": """
                import jax
                def test_it():
                    kept = []
                    def f(x):
                        kept.append(x)
                        return x * 2
                    jax.linearize(f, 1.0)
                    kept.clear()
            """
        },
    ),
    Case(
        "eager_grad_default",
        {
            "test_eager_grad_default.py": """
                import jax
                def test_it():
                    def f(x, seen=[]):
                        seen.append(x)
                        return x * 2
                    jax.grad(f)(1.0)
                    f.__defaults__[0].clear()
            """
        },
    ),
)
