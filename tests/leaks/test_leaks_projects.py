"""The pytest plugin's default mode against JAX's own checker, on small projects.

Each case is a library module (or package) that keeps something made inside a
transform at module level, and a test that reaches the library one of the ways
tests do: `import mylib`, `from mylib import step`, `import pkg.mod as m`,
through a fixture, a class attribute, a helper module, an instance's method.
Every case has a clean twin that keeps a concrete value in the same place. The
whole project runs twice in a subprocess, under `pytest --lift-leaks` (the
default mode, JAX's checker off) and under `JAX_CHECK_TRACER_LEAKS=1` without
the plugin switched on (runs shared with the plugin's other tests run so): every test JAX's checker fails, the default mode fails too, naming
where the tracer is kept, the function, its `file:line` and the variable; no
clean twin fails under either.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import pytest
from shared_runs import DEFAULT, JAX_CHECKER, Run

# {kept}: `x` (the tracer) in the leak, `CONCRETE` in the twin. The line of
# each function that holds the value is what a report must name.
CLOSURE_IN_LIST = """\
import jax
import numpy

CONCRETE = numpy.float32(1.0)
_REGISTRY = []


def step(x):
    def traced(x):
        kept = {kept}

        def held():
            return kept

        _REGISTRY.append(held)
        return x * 2

    return jax.jit(traced)(x)
"""
CLOSURE_LINE = 12  # `def held()`

CLOSURE_IN_DICT = CLOSURE_IN_LIST.replace("_REGISTRY = []", "_REGISTRY = {{}}").replace(
    "_REGISTRY.append(held)", '_REGISTRY["held"] = held'
)

ON_NAMESPACE = """\
import types

import jax
import numpy

CONCRETE = numpy.float32(1.0)
STATE = types.SimpleNamespace()


def step(x):
    def traced(x):
        kept = {kept}

        def held():
            return kept

        STATE.last = held
        return x * 2

    return jax.jit(traced)(x)
"""

ON_CLASS = """\
import jax
import numpy

CONCRETE = numpy.float32(1.0)


class Registry:
    items = []


def step(x):
    def traced(x):
        kept = {kept}

        def held():
            return kept

        Registry.items.append(held)
        return x * 2

    return jax.jit(traced)(x)
"""

TRACER_IN_LIST = """\
import jax
import numpy

CONCRETE = numpy.float32(1.0)
_CACHE = []


def step(x):
    def traced(x):
        _CACHE.append({kept})
        return x * 2

    return jax.jit(traced)(x)
"""

METHOD = """\
import jax
import numpy

CONCRETE = numpy.float32(1.0)
_SEEN = []


class Model:
    def step(self, x):
        def traced(x):
            kept = {kept}

            def held():
                return kept

            _SEEN.append(held)
            return x * 2

        return jax.jit(traced)(x)
"""

AT_EXIT = """\
import atexit

import jax
import numpy

CONCRETE = numpy.float32(1.0)


def step(x):
    def traced(x):
        kept = {kept}
        atexit.register(lambda: kept)
        return x * 2

    return jax.jit(traced)(x)
"""

IN_AN_ERROR = """\
import jax
import numpy

CONCRETE = numpy.float32(1.0)
_ERRORS = []


def step(x):
    def traced(x):
        _ERRORS.append(ValueError({kept}))
        return x * 2

    return jax.jit(traced)(x)
"""

IN_A_LIBRARY_OBJECT = """\
import jax
import numpy

CONCRETE = numpy.float32(1.0)
_KEPT = []


def step(x):
    def traced(x):
        _KEPT.append(numpy.vectorize(len, doc={kept}))
        return x * 2

    return jax.jit(traced)(x)
"""


class Case(NamedTuple):
    name: str
    library: str  # the library's source, with {kept}
    test: str  # the test's source, {m} the library module's name
    report: str  # a regex the default mode's report must match (MODULE: its name)
    package: bool = False  # the library is `{m}/mod.py` in a package


HELD = r"step\.<locals>\.traced\.<locals>\.held \(.*{file}:{line}\), captured variable 'kept'"
REGISTRY_ADVICE = r"return the value from the transformed function instead of storing"


def _held(where: str, file: str = "MODULE.py", line: int = CLOSURE_LINE) -> str:
    return (
        re.escape(where)
        + " -> "
        + HELD.format(file=re.escape(file), line=line)
        + r": float32\[\] from jit\(traced\) — "
        + REGISTRY_ADVICE
    )


CASES = (
    Case(
        "import_module",
        CLOSURE_IN_LIST,
        "import {m}\n\ndef test_step():\n    {m}.step(1.0)\n",
        _held("MODULE._REGISTRY[0]"),
    ),
    Case(
        "from_import",
        CLOSURE_IN_LIST,
        "from {m} import step\n\ndef test_step():\n    step(1.0)\n",
        _held("MODULE._REGISTRY[0]"),
    ),
    Case(
        "package_alias",
        CLOSURE_IN_LIST,
        "import {m}.mod as m\n\ndef test_step():\n    m.step(1.0)\n",
        _held("MODULE.mod._REGISTRY[0]", file="mod.py"),
        package=True,
    ),
    Case(
        "package_dotted",
        CLOSURE_IN_LIST,
        "import {m}.mod\n\ndef test_step():\n    {m}.mod.step(1.0)\n",
        _held("MODULE.mod._REGISTRY[0]", file="mod.py"),
        package=True,
    ),
    Case(
        "fixture_value",
        CLOSURE_IN_LIST,
        "import pytest\nimport {m}\n\n@pytest.fixture\ndef step():\n"
        "    return {m}.step\n\ndef test_step(step):\n    step(1.0)\n",
        _held("MODULE._REGISTRY[0]"),
    ),
    Case(
        "fixture_calls",
        CLOSURE_IN_LIST,
        "import pytest\nimport {m}\n\n@pytest.fixture\ndef trained():\n"
        "    return {m}.step(1.0)\n\ndef test_step(trained):\n    assert trained == 2\n",
        _held("MODULE._REGISTRY[0]"),
    ),
    Case(
        "class_attribute",
        CLOSURE_IN_LIST,
        "import {m}\n\nclass TestStep:\n    step = staticmethod({m}.step)\n\n"
        "    def test_step(self):\n        self.step(1.0)\n",
        _held("MODULE._REGISTRY[0]"),
    ),
    Case(
        "helper_module",
        CLOSURE_IN_LIST,
        "import helper_{m}\n\ndef test_step():\n    helper_{m}.train()\n",
        _held("MODULE._REGISTRY[0]"),
    ),
    Case(
        "registry_key",
        CLOSURE_IN_DICT,
        "import {m}\n\ndef test_step():\n    {m}.step(1.0)\n",
        _held("MODULE._REGISTRY['held']"),
    ),
    Case(
        "attribute_path",
        ON_NAMESPACE,
        "import {m}\n\ndef test_step():\n    {m}.step(1.0)\n",
        _held("MODULE.STATE.last", line=14),
    ),
    Case(
        "class_registry",
        ON_CLASS,
        "import {m}\n\ndef test_step():\n    {m}.step(1.0)\n",
        _held("MODULE.Registry.items[0]", line=15),
    ),
    Case(
        "tracer_in_list",
        TRACER_IN_LIST,
        "import {m}\n\ndef test_step():\n    {m}.step(1.0)\n",
        re.escape("MODULE._CACHE[0]: float32[] from jit(traced), in global '_CACHE' ")
        + r"used by step \(.*MODULE\.py:8\)",
    ),
    Case(
        "instance_method",
        METHOD,
        "import {m}\n\ndef test_step():\n    {m}.Model().step(1.0)\n",
        re.escape("MODULE._SEEN[0] -> Model.step.<locals>.traced.<locals>.held (")
        + r".*MODULE\.py:13\), captured variable 'kept'",
    ),
    Case(
        "held_by_no_variable",
        AT_EXIT,
        "import {m}\n\ndef test_step():\n    {m}.step(1.0)\n",
        re.escape("<held by no variable lift can see: by JAX")
        + r".* -> step\.<locals>\.traced\.<locals>\.<lambda> \(.*MODULE\.py:12\), "
        + r"captured variable 'kept': float32\[\] from jit\(traced\)",
    ),
    Case(
        "in_a_kept_error",
        IN_AN_ERROR,
        "import {m}\n\ndef test_step():\n    {m}.step(1.0)\n",
        re.escape("MODULE._ERRORS[0].args[0]: float32[] from jit(traced), in ")
        + r"global '_ERRORS' used by step \(.*MODULE\.py:8\)",
    ),
    Case(
        "in_an_object_lift_does_not_open",
        IN_A_LIBRARY_OBJECT,
        "import {m}\n\ndef test_step():\n    {m}.step(1.0)\n",
        # No walk opens a `numpy.vectorize`: the referrer chain names it.
        r"alive after JAX's check of its trace, no variable lift opens holding "
        r"it; referrers, from the tracer up: DynamicJaxprTracer <- "
        r"numpy\.vectorize\._doc <- list\[0\] <- global _KEPT of module MODULE: "
        r"float32\[\] from jit\(traced\)",
    ),
)


def _module(case: Case, leak: bool) -> str:
    return f"lib_{case.name}_{'leak' if leak else 'clean'}"


def _project() -> dict[str, str]:
    files: dict[str, str] = {}
    for case in CASES:
        for leak in (True, False):
            m = _module(case, leak)
            source = case.library.format(kept="x" if leak else "CONCRETE")
            if case.package:
                files[f"{m}/__init__.py"] = ""
                files[f"{m}/mod.py"] = source
            else:
                files[f"{m}.py"] = source
            if case.name == "helper_module":
                files[f"helper_{m}.py"] = (
                    f"import {m}\n\ndef train():\n    return {m}.step(1.0)\n"
                )
            files[f"test_{m}.py"] = case.test.format(m=m)
    return files


DEFAULT.add("projects", _project())
JAX_CHECKER.add("projects", _project())

Runs = tuple[Run, Run]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """The project under the default mode and under JAX's checker: each test
    file's failures (`None`: its test passed) by `.failures(file)`."""
    return DEFAULT(tmp_path_factory), JAX_CHECKER(tmp_path_factory)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_default_mode_fails_what_jax_fails_and_names_it(case: Case, runs: Runs) -> None:
    ours, theirs = runs
    test = f"test_{_module(case, True)}.py"
    jax_says = theirs.failures(test)
    assert jax_says is not None, "JAX's checker passed the leak"
    assert "Leaked" in jax_says
    report = ours.failures(test)
    assert report is not None, "the default mode passed a leak JAX's checker fails"
    m = _module(case, True)
    assert re.search(case.report.replace("MODULE", re.escape(m)), report), report


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_clean_twin_passes_both(case: Case, runs: Runs) -> None:
    ours, theirs = runs
    test = f"test_{_module(case, False)}.py"
    assert theirs.outcomes(test) == {"passed": 1}, theirs.text(test)
    assert ours.outcomes(test) == {"passed": 1}, ours.text(test)


# What tests keep that is no leak: results of transforms that hold no tracer,
# errors raised inside a trace, callbacks, pmap, equinox's filtered transforms.
NOT_LEAKS = """
import jax, jax.numpy as jnp, pytest, equinox as eqx, numpy as np

@pytest.fixture(scope="module")
def linearized():
    return jax.linearize(jnp.sin, 1.0)

KEPT = {}

def test_linearize_fixture(linearized):
    out, f_jvp = linearized
    assert abs(float(f_jvp(1.0)) - float(jnp.cos(1.0))) < 1e-6

def test_make_jaxpr_kept():
    KEPT["jaxpr"] = jax.make_jaxpr(lambda x: jnp.sin(x) * 2)(1.0)

def test_lowered_kept():
    KEPT["lowered"] = jax.jit(lambda x: x * 2).lower(1.0)

def test_vjp_kept():
    KEPT["vjp"] = jax.vjp(jnp.sin, 1.0)[1]

def test_raises_inside_jit():
    def f(x):
        y = jax.lax.scan(lambda c, z: (c + z, z), x, jnp.arange(3.0))[0]
        raise ValueError("boom")
    with pytest.raises(ValueError, match="boom"):
        jax.jit(f)(1.0)

def test_raises_concretization():
    with pytest.raises(jax.errors.ConcretizationTypeError):
        jax.jit(lambda x: float(x))(1.0)

def test_eqx_filter_jit_grad():
    model = eqx.nn.MLP(2, 2, 4, 2, key=jax.random.key(0))
    @eqx.filter_jit
    def loss(m, x):
        return jnp.sum(m(x) ** 2)
    g = eqx.filter_grad(loss)(model, jnp.ones(2))
    KEPT["grad"] = g

def test_checkpoint_custom_vjp():
    f = jax.checkpoint(lambda x: jnp.sin(x) * x, policy=jax.checkpoint_policies.nothing_saveable)
    assert jax.grad(f)(1.0) is not None
    assert jax.jit(jax.vmap(jax.grad(jax.nn.softplus)))(jnp.ones(3)) is not None

def test_while_cond_pmap_shard():
    jax.lax.while_loop(lambda c: c < 3, lambda c: c + 1, 0)
    jax.pmap(lambda x: x * 2)(jnp.ones((1,)))

def test_pure_callback():
    def cb(x): return np.asarray(x) * 2
    jax.jit(lambda x: jax.pure_callback(cb, jax.ShapeDtypeStruct((), jnp.float32), x))(1.0)

def test_jit_of_method_cached_class():
    class M(eqx.Module):
        w: jax.Array
        def __call__(self, x): return self.w * x
    KEPT["m"] = M(jnp.ones(2))
    jax.jit(KEPT["m"].__call__)(jnp.ones(2))
"""


DEFAULT.add("projects", {"test_not_leaks.py": NOT_LEAKS})
JAX_CHECKER.add("projects", {"test_not_leaks.py": NOT_LEAKS})


def test_default_mode_passes_what_is_no_leak(runs: Runs) -> None:
    ours, theirs = runs
    ours.assert_outcomes("test_not_leaks.py", passed=11)
    theirs.assert_outcomes("test_not_leaks.py", passed=11)
