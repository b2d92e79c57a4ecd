"""Run every benchmark (`benchmarks/bench_*.py`) and write `benchmarks/README.md`.

    python benchmarks/run.py            # inside the project's virtualenv
    python benchmarks/run.py --quick    # fewer repeats, for a fast look
    python benchmarks/run.py --only bench_optax

Each `bench_*.py` module has a `main()` (taking `quick` if it wants) that returns
its rows: a list of dicts (one table) or a dict of tables by title. Each table
becomes a markdown table under the module's heading.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import importlib.metadata
import inspect
import io
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

LEAD = """\
# lift benchmarks

First, what choosing a way to sweep hyperparameters comes down to: a
learning-rate sweep with plain optax, `optax.inject_hyperparams`, equinox's
`closure_to_pytree` and `lift`, side by side, and the same choice in two
libraries built on closures (blackjax's samplers, a GenJAX-style model
library). Then what a `lift.jit` call and leak checking cost. The
goals the project holds its own code to, measured against 0.1.0, come last.
"""

# Benchmarks a user compares against, in this order; the others follow by name.
FIRST = ("bench_optax",)

HOWTO = """\
## Regenerating this page

Regenerate this page, inside the project's virtualenv (`scripts/demo.sh` or
`pip install -e ".[bench]"` makes one):

```bash
python benchmarks/run.py
```

`python benchmarks/run.py --quick` gives a fast, rougher look without writing this
file unless `--write` is given; `--only bench_optax` runs one module. Each
`benchmarks/bench_*.py` also runs alone (`python benchmarks/bench_optax.py`).
Timings are medians of repeated samples, with their min-max; the candidates of a
table take turns sample by sample, so a busy machine slows them alike. Compare
ratios within a table rather than absolute times across machines.
"""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _commit() -> str:
    """The checkout's commit, with `+` when it has uncommitted changes."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return ""
    return f" (commit {head}{'+' if dirty else ''})"


def header() -> str:
    import jax

    import lift

    load = (
        ", ".join(f"{x:.1f}" for x in os.getloadavg())
        if hasattr(os, "getloadavg")
        else "?"
    )
    versions = ", ".join(
        f"{name} {version}"
        for name, version in (
            ("lift", lift.__version__ + _commit()),
            ("jax", jax.__version__),
            ("jaxlib", _version("jaxlib")),
            ("optax", _version("optax")),
            ("equinox", _version("equinox")),
            ("numpy", _version("numpy")),
        )
    )
    return (
        f"{LEAD}\n"
        "## Machine\n\n"
        f"- CPU: {_cpu_model()}, {os.cpu_count()} cores ({jax.default_backend()} backend, "
        f"{jax.device_count()} device{'s' if jax.device_count() != 1 else ''})\n"
        f"- Python {platform.python_version()} on {platform.system()} {platform.release()}\n"
        f"- {versions}\n"
        f"- Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; load average "
        f"at start: {load}\n"
    )


def markdown(rows: list[dict[str, Any]]) -> str:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---" for _ in keys) + "|"]
    lines += [
        "| " + " | ".join(str(row.get(k, "")) for k in keys) + " |" for row in rows
    ]
    return "\n".join(lines)


def run_module(name: str, quick: bool) -> str:
    module = importlib.import_module(name)
    doc = inspect.getdoc(module) or name
    title, _, rest = doc.partition("\n\n")
    main = module.main
    kwargs = {"quick": quick} if "quick" in inspect.signature(main).parameters else {}
    print(f"running {name} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            result = main(**kwargs)
    except Exception:
        # One broken benchmark must not cost the others' results.
        trace = traceback.format_exc()
        print(trace, file=sys.stderr)
        return f"## {title.rstrip('.')} (`benchmarks/{name}.py`)\n\nFailed:\n\n```\n{trace}```\n"
    elapsed = time.perf_counter() - start
    print(f"  done in {elapsed:.0f} s", file=sys.stderr, flush=True)
    tables: dict[str, list[dict[str, Any]]] = (
        result if isinstance(result, dict) else {"": list(result)}
    )
    # The docstring minus its "Run `python ...`" paragraph.
    intro = "\n\n".join(p for p in rest.split("\n\n") if not p.startswith("Run "))
    parts = [f"## {title.rstrip('.')} (`benchmarks/{name}.py`)", ""]
    if intro:
        parts += [intro, ""]
    for table_title, rows in tables.items():
        if table_title:
            parts += [f"### {table_title}", ""]
        parts += [markdown(rows), ""]
    # What reads best after the numbers (how a result comes about).
    notes = getattr(module, "NOTES", "")
    if notes:
        parts += [inspect.cleandoc(notes), ""]
    return "\n".join(parts)


def assemble(header: str, sections: list[str], versions: str) -> str:
    """The page: the lead and the machine, the benchmarks (the comparisons
    users make first), the goals measured against 0.1.0, how to regenerate."""
    text = header + "\n" + "\n".join(sections)
    if versions:
        text += "\n" + versions
    return text.rstrip() + "\n\n" + HOWTO


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and sizes")
    parser.add_argument(
        "--only", action="append", help="run only this module (repeatable)"
    )
    parser.add_argument(
        "--write", action="store_true", help="write README.md even with --quick"
    )
    parser.add_argument(
        "--out", type=Path, default=HERE / "README.md", help="page to write"
    )
    args = parser.parse_args()

    sys.path.insert(0, str(HERE))
    names = sorted(
        (p.stem for p in HERE.glob("bench_*.py")),
        key=lambda n: (FIRST.index(n) if n in FIRST else len(FIRST), n),
    )
    if args.only:
        names = [n for n in names if n in args.only]
    top = header()
    sections = [run_module(name, args.quick) for name in names]
    # Comparisons between versions (`compare.py`) are measured apart and kept.
    versions = HERE / "versions.md"
    text = assemble(top, sections, versions.read_text() if versions.exists() else "")
    if args.quick and not args.write:
        print(text)
        return
    args.out.write_text(text.rstrip() + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
