"""Where a population's device time goes: a profile of `bench_population`'s ways.

Each way's compiled program runs once under `jax.profiler`; the device's trace
gives every XLA op's time. The ops are grouped (matrix products, elementwise
and reductions, copies between memories, the rest), and the bytes of every
operand and result that lives in the device's main memory (HBM: no `S(n)`
memory space in its layout) are summed, with the transfers of the async
copies. So each way gets its achieved FLOP/s (XLA's cost analysis over the
device time) and HBM bandwidth (those bytes over the device time) beside the
chip's peaks.

Run `python benchmarks/profile_population.py --out benchmarks/results` on a
TPU (`--size smoke` checks that it runs on a CPU, whose trace has no device
ops); it writes `population-profile-DEVICE.md` and `.json`.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import re
import tempfile
from pathlib import Path
from typing import Any

import bench_population as bp
import jax
import jax.numpy as jnp
import numpy as np
from jax.profiler import ProfileData
from pages import markdown

WAYS = (
    "one rate's program, once per rate",
    "the same, only the rate dynamic (static=)",
    "vmap outside the scan",
    "chunks of 4 rates (lax.map batch_size)",
    "vmap by hand, no lift (optax.adamw(traced lr))",
)
_SHAPE = re.compile(r"\b(pred|[suf]\d+|bf16)\[([\d,]*)\]\{([^}]*)\}")
_BYTES = {"pred": 1, "bf16": 2}
# Ops that hold others (their time is their body's) or move nothing.
_HOLDERS = {"while", "call", "conditional", "tuple", "get-tuple-element",
            "bitcast", "parameter", "constant"}  # fmt: skip
GROUPS = ("matrix products", "elementwise and reductions", "copies", "other")


def _nbytes(dtype: str, dims: str) -> int:
    size = _BYTES.get(dtype) or int(dtype[1:]) // 8
    return size * math.prod(int(d) for d in dims.split(",") if d)


def _hbm_bytes(text: str) -> int:
    """Bytes of the shapes in one op's text that live in HBM."""
    return sum(
        _nbytes(dtype, dims)
        for dtype, dims, layout in _SHAPE.findall(text)
        if "S(" not in layout
    )


def _op(text: str) -> str:
    """The HLO op of one instruction's text: `%x = TYPE op(...)`; from the
    instruction's name (`%copy.3`, `%add_fusion.2`) when the text is cut."""
    name, _, rest = text.partition("=")
    match = re.search(r"[})]\s+([a-z][\w-]*)\(", rest)
    if match:
        return match[1]
    stem = name.strip().lstrip("%").split(".")[0]
    return "fusion" if stem.endswith("fusion") else stem


def _group(text: str) -> str:
    op = _op(text)
    if op in ("convolution", "dot") or (op == "fusion" and "kind=kOutput" in text):
        return "matrix products"  # XLA's TPU fusions around a product
    if op.startswith(("copy", "slice-", "async")):
        return "copies"
    if op in ("fusion", "broadcast", "reduce", "add", "multiply", "select", "convert"):
        return "elementwise and reductions"
    return "other"


def profile(fn: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    """Device time by group, HBM bytes and the program's time, of one call."""
    compiled = fn.lower(*args).compile()
    jax.block_until_ready(compiled(*args))
    flops, _ = bp._cost(compiled)
    with tempfile.TemporaryDirectory() as d:
        jax.profiler.start_trace(d)
        jax.block_until_ready(compiled(*args))
        jax.profiler.stop_trace()
        (path,) = glob.glob(f"{d}/**/*.xplane.pb", recursive=True)
        data = ProfileData.from_file(path)
    plane = data.find_plane_with_name("/device:TPU:0")
    ops: dict[str, list[Any]] = {}
    hbm = 0
    module_ns = 0.0
    for line in plane.lines if plane else ():
        if line.name == "XLA Modules":
            module_ns += sum(e.duration_ns for e in line.events)
        elif line.name == "XLA Ops":
            for e in line.events:
                if _op(e.name) in _HOLDERS:
                    continue
                key = e.name.split("=", 1)[0].strip()
                entry = ops.setdefault(key, [e.name[:2000], 0, 0.0])
                entry[1] += 1
                entry[2] += e.duration_ns / 1e9
                hbm += _hbm_bytes(e.name)
        elif line.name == "Async XLA Ops":
            for e in line.events:
                shapes = _SHAPE.findall(e.name)
                if len(shapes) > 1:  # (source, destination, ...): one transfer
                    hbm += _nbytes(shapes[1][0], shapes[1][1])
    return {"device_s": module_ns / 1e9, "hbm_bytes": hbm, "flops": flops,
            "top_ops": sorted(ops.values(), key=lambda o: -o[2])}  # fmt: skip


def measure(size: str, steps: int) -> dict[str, Any]:
    s = bp.SIZES[size]
    n = s["rates"]
    p = bp.Problem(s["depth"], s["width"], s["batch"])
    lrs = jnp.asarray(np.geomspace(1e-4, 1e-2, n), jnp.float32)
    chunks = tuple(k for k in s["chunks"] if k == 4) or s["chunks"][:1]
    ways = bp.ways(p, steps, chunks)
    rows = []
    for name in WAYS:
        if name not in ways:
            continue
        fn, args_of, calls = ways[name]
        bp.log(f"{name} ...")
        rates = 1 if calls == "each" else n
        args = args_of(lrs[0]) if calls == "each" else args_of(lrs)
        rows.append({"way": name, "rates": rates, **profile(fn, args)})
    costs = bp.step_costs(p, n, chunks)
    device = jax.devices()[0]
    return {"date": bp.datetime.datetime.now(bp.datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "jax": jax.__version__, "device_kind": device.device_kind, "size": size,
            "steps": steps, "step_costs": {str(k): list(v) for k, v in costs.items()},
            "sizes": {k: list(v) if isinstance(v, tuple) else v
                                      for k, v in s.items()}, "rows": rows}  # fmt: skip


def table(r: dict[str, Any]) -> list[dict[str, str]]:
    peaks = bp.PEAKS.get(r["device_kind"], (math.nan, math.nan))
    costs = {int(k): v for k, v in r["step_costs"].items()}
    out = []
    for row in r["rows"]:
        t = row["device_s"] or math.nan
        k = bp._rate_k(row["way"], r["sizes"]["rates"])
        flops = costs.get(k, costs[1])[0] * row["rates"] * r["steps"]
        per = t / (row["rates"] * r["steps"])
        entry = {"way": row["way"], "device time a rate-step": bp._fmt(per)}
        groups = dict.fromkeys(GROUPS, 0.0)
        for text, _, seconds in row["top_ops"]:
            if _op(text) not in _HOLDERS:
                groups[_group(text)] += seconds
        for group, seconds in groups.items():
            entry[group] = f"{seconds / t:.0%}"
        entry["FLOP/s (of peak)"] = (
            f"{bp._rate(flops / t, 'FLOP/s')} ({flops / t / peaks[0]:.0%})"
        )
        entry["HBM bytes a rate-step"] = (
            f"{row['hbm_bytes'] / (row['rates'] * r['steps']) / 1e6:.1f} MB"
        )
        entry["HBM B/s (of peak)"] = (
            f"{bp._rate(row['hbm_bytes'] / t, 'B/s')} ({row['hbm_bytes'] / t / peaks[1]:.0%})"
        )
        out.append(entry)
    return out


def report(r: dict[str, Any]) -> str:
    return (
        f"Profiled on {r['device_kind']}, {r['date']}: JAX {r['jax']}, `--size "
        f"{r['size']}`, {r['steps']} steps a run, one traced call a way. Shares are "
        "of the program's device time, from its longest ops (the rest is under 12 %); "
        "HBM bytes are the operands and results in the device's main memory of every "
        "op, and the async copies' transfers.\n\n" + markdown(table(r)) + "\n"
    )


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(bp.SIZES), default="full")
    parser.add_argument(
        "--steps", type=int, default=50, help="steps a run (the trace's length)"
    )
    parser.add_argument("--out", type=Path, help="directory for NAME.md and NAME.json")
    parser.add_argument(
        "--render", type=Path, help="write NAME.md again from NAME.json"
    )
    args = parser.parse_args()
    if args.render:
        args.render.with_suffix(".md").write_text(
            report(json.loads(args.render.read_text()))
        )
        return
    r = measure(args.size, args.steps)
    text = report(r)
    print(text)
    if args.out:
        bp.write(args.out, "population-profile", r, text)


if __name__ == "__main__":
    cli()
