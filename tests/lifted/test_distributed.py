"""Two processes with `jax.distributed` on CPU, over loopback.

Each process starts JAX with two host devices and joins a coordinator on
127.0.0.1 (a free port), so the global mesh has four devices in two processes.
Both lift the same closure, whose captures are global arrays sharded across
the processes, and call it through `jax.jit` (and `lift.jit`); each process
prints what it sees of the result, which must equal the result computed by one
process alone.

Cross-process collectives on CPU need jaxlib's gloo (or MPI) collectives. When
the installed jaxlib has none, the worker exits with a distinct code and the
test is skipped with that reason; any other failure fails the test. Every wait
is bounded.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import lift

NO_COLLECTIVES = 77
TIMEOUT = 240.0  # per process, including JAX start-up on a busy machine

WORKER = textwrap.dedent(
    """
    import json, sys
    import jax

    NO_COLLECTIVES = 77
    port, process_id = int(sys.argv[1]), int(sys.argv[2])
    try:
        from jax._src.lib import xla_client
        if not hasattr(xla_client._xla, "make_gloo_tcp_collectives"):
            raise RuntimeError("this jaxlib has no gloo CPU collectives")
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except (AttributeError, ImportError, RuntimeError) as e:
        print(json.dumps({"skip": f"{type(e).__name__}: {e}"}), flush=True)
        sys.exit(NO_COLLECTIVES)

    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=2,
        process_id=process_id,
        initialization_timeout=120,
    )
    import numpy as np
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P
    import lift

    assert jax.process_count() == 2 and jax.device_count() == 4, jax.devices()
    mesh = jax.make_mesh((4,), ("d",))
    w = np.arange(32, dtype=np.float32).reshape(8, 4) / 10
    b = np.linspace(-1, 1, 4).astype(np.float32)
    x = np.ones((2, 8), np.float32)

    def global_array(value, spec):
        sharding = NamedSharding(mesh, spec)
        return jax.make_array_from_callback(value.shape, sharding, lambda idx: value[idx])

    ws = global_array(w, P("d", None))
    bs = global_array(b, P())
    assert not ws.is_fully_addressable  # really spread over both processes
    def make(ws, bs, lr):
        def layer(x):
            return jnp.tanh(x @ ws + bs) * lr

        return layer

    layer = make(ws, bs, 0.5)
    lifted = lift.lift(layer)
    leaves = jax.tree_util.tree_leaves(lifted)
    assert any(getattr(l, "sharding", None) == ws.sharding for l in leaves)

    replicated = NamedSharding(mesh, P())
    traces = 0

    def trampoline(g, x):
        global traces
        traces += 1
        return g(x)

    call = jax.jit(trampoline, out_shardings=replicated)
    xs = global_array(x, P())
    out = call(lifted, xs)
    # New captures, same program.
    out2 = call(lift.lift(make(ws * 2, bs, 0.5)), xs)
    assert traces == 1, traces
    via_lift_jit = lift.jit(layer, out_shardings=replicated)(xs)
    print(json.dumps({
        "process": jax.process_index(),
        "out": np.asarray(out.addressable_data(0)).tolist(),
        "out2": np.asarray(out2.addressable_data(0)).tolist(),
        "lift_jit": np.asarray(via_lift_jit.addressable_data(0)).tolist(),
    }), flush=True)
    jax.distributed.shutdown()
    """
)


def _free_port() -> int:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    except OSError as e:  # a sandbox that allows no socket, not even loopback
        pytest.skip(f"jax.distributed needs a loopback socket: {e}")


def _reference() -> tuple[np.ndarray, np.ndarray]:
    w = np.arange(32, dtype=np.float32).reshape(8, 4) / 10
    b = np.linspace(-1, 1, 4).astype(np.float32)
    x = np.ones((2, 8), np.float32)
    return np.tanh(x @ w + b) * 0.5, np.tanh(x @ (2 * w) + b) * 0.5


def test_two_processes_hold_a_lifted_over_global_arrays(tmp_path: Path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = _free_port()
    repo = str(Path(lift.__file__).resolve().parent.parent)
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "PYTHONPATH": os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(port), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(2)
    ]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT)
            results.append((p.returncode, out, err))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        outputs = [p.communicate(timeout=30) for p in procs]
        pytest.fail(f"a process did not finish within {TIMEOUT:.0f} s: {outputs}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)

    if any(code == NO_COLLECTIVES for code, _, _ in results):
        reason = json.loads(results[0][1].strip().splitlines()[-1])["skip"]
        pytest.skip(f"the installed jaxlib lacks CPU collectives: {reason}")
    for code, out, err in results:
        assert code == 0, f"worker failed ({code}):\n{out}\n{err[-4000:]}"
    expected, expected2 = _reference()
    seen = sorted(
        (json.loads(out.strip().splitlines()[-1]) for _, out, _ in results),
        key=lambda r: r["process"],
    )
    assert [r["process"] for r in seen] == [0, 1]
    for r in seen:
        np.testing.assert_allclose(r["out"], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(r["out2"], expected2, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(r["lift_jit"], expected, rtol=1e-5, atol=1e-6)
