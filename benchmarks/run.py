"""Run every benchmark (`benchmarks/bench_*.py`) and write the benchmarks pages.

    python benchmarks/run.py            # the pages: README.md and internals.md
    python benchmarks/run.py --quick    # fewer repeats, printed, for a fast look
    python benchmarks/run.py --smoke    # tiny sizes, one repeat: does it all run?
    python benchmarks/run.py --only bench_optax --only path/to/bench_x.py
    python benchmarks/run.py --tables   # the pages' tables and charts, from results/
    python benchmarks/run.py --check    # exit 1 if a generated table is stale

Each `bench_*.py` module has a `main()` (taking `quick` and `smoke` if it
wants) that returns its rows: a list of dicts (one table) or a dict of tables
by title. Each table becomes a Markdown table under the module's heading: on
the users' page (`README.md`), or on the developers' page (`internals.md`)
when its title starts with one of the module's `INTERNAL` titles.

`--tables` runs no benchmark: it writes the tables and charts that the
results files (`benchmarks/results/*.json`, from `bench_accelerator.py`) give,
into the regions of the pages marked `<!-- generated: ... -->` (see
`benchmarks/pages.py`).

The exit status is 1 when any module raised (its traceback is printed, the
other modules still run, and no page is written), so that a benchmark that
rots fails the test suite (`tests/test_benchmarks.py`) instead of a page.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import importlib.metadata
import importlib.util
import inspect
import io
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# No title: the docs' Benchmarks page includes this page under its own, after
# an accelerator's tables (benchmarks/results/).
LEAD = """\
lift's benchmarks on a CPU, written by `python benchmarks/run.py`. First what
choosing a way to sweep hyperparameters costs, side by side in one process:
plain optax (a compile per value), `optax.inject_hyperparams`, equinox's
`closure_to_pytree`, `lift.lift` and `lift.jit`; then what leak checking and
a `lift.jit` call cost, and sweeps in libraries built on closures. A larger
model, the way an accelerator runs it, is measured apart: its tables, a
CPU's and a TPU's, are in `benchmarks/results/`. Compare ratios within a
table rather than absolute times across machines.
"""

# No title either: the docs' page for developers includes it.
INTERNAL_LEAD = """\
How lift's own paths (`tree_flatten`, lifting fresh objects, converting new
floats) cost and scale, and the goals the project holds them to: the tables
`python benchmarks/run.py` writes beside the users' page.
"""

# The benchmarks a user decides by first; the others follow by name.
FIRST = ("bench_optax", "bench_leaks", "bench_jit")

HOWTO = """\
## Regenerating this page

Inside the project's virtualenv with the `bench` extra
(`pip install -e ".[bench]"`):

```bash
python benchmarks/run.py
```

It writes this page (`benchmarks/README.md`) and the developers' tables
(`benchmarks/internals.md`): about 10 minutes on 2 busy cores.
`--quick` gives a fast, rougher look, printed; `--smoke` runs every module at
tiny sizes (the test suite does, to keep them working); `--only bench_optax`
runs one module. Each `benchmarks/bench_*.py` also runs alone
(`python benchmarks/bench_optax.py`). Timings are medians of repeated
samples; the candidates of a table take turns sample by sample, so a busy
machine slows them alike.
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


def machine() -> str:
    """The machine and versions, as a Markdown list."""
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
            ("blackjax", _version("blackjax")),
        )
    )
    count = jax.device_count()
    return (
        f"- CPU: {_cpu_model()}, {os.cpu_count()} cores ({jax.default_backend()} "
        f"backend, {count} device{'s' if count != 1 else ''})\n"
        f"- Python {platform.python_version()} on {platform.system()} "
        f"{platform.release()}\n"
        f"- {versions}\n"
        f"- Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; load "
        f"average at start: {load}\n"
    )


def markdown(rows: list[dict[str, Any]]) -> str:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---" for _ in keys) + "|"]
    lines += [
        "| " + " | ".join(str(row.get(k, "")) for k in keys) + " |" for row in rows
    ]
    return "\n".join(lines)


def _import(name: str) -> ModuleType:
    """A module of `benchmarks/` by name, or any `bench_*.py` by path."""
    if name.endswith(".py"):
        path = Path(name).resolve()
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(name)


def _heading(module: ModuleType, name: str) -> tuple[str, str]:
    """A module's heading on the page, and its docstring's other paragraphs."""
    doc = inspect.getdoc(module) or name
    title, _, rest = doc.partition("\n\n")
    # The docstring minus its "Run `python ...`" paragraph.
    intro = "\n\n".join(p for p in rest.split("\n\n") if not p.startswith("Run "))
    title = " ".join(title.split()).rstrip(".")
    return f"## {title} (`benchmarks/{Path(name).stem}.py`)", intro


# Modules whose tables the results files publish: the page says where they
# are rather than print a run of its own, which would be of another date
# beside them. The smoke run still runs them.
PUBLISHED = {
    "bench_accelerator": """\
Its tables are not measured again here. `python
benchmarks/bench_accelerator.py --size cpu --out benchmarks/results --name
cpu` writes them to `benchmarks/results/cpu.md` (a TPU's are
`benchmarks/results/tpu-v5e.md`), and `python benchmarks/run.py --tables`
writes the headline tables and the charts from those results files: the
Benchmarks page opens with the CPU's, the Accelerators page with the TPU's.
""",
}


def published(name: str) -> tuple[str, str]:
    """The users' section of a module the results files publish."""
    heading, intro = _heading(_import(name), name)
    return "\n".join([heading, "", intro, "", PUBLISHED[name]]), ""


def run_module(name: str, quick: bool, smoke: bool) -> tuple[str, str] | None:
    """Run one module: its section of the users' page and of the developers'
    page, or None when it raised (the traceback printed)."""
    print(f"running {name} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        module = _import(name)
        main = module.main
        parameters = inspect.signature(main).parameters
        kwargs = {
            key: value
            for key, value in (("quick", quick or smoke), ("smoke", smoke))
            if key in parameters
        }
        with contextlib.redirect_stdout(io.StringIO()):
            result = main(**kwargs)
    except Exception:
        # One broken benchmark must not cost the others' results; the run
        # fails at the end.
        traceback.print_exc()
        print(f"  {name} FAILED", file=sys.stderr, flush=True)
        return None
    print(f"  done in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    tables: dict[str, list[dict[str, Any]]] = (
        result if isinstance(result, dict) else {"": list(result)}
    )
    internal_titles = tuple(getattr(module, "INTERNAL", ()))
    heading, intro = _heading(module, name)
    parts: dict[bool, list[str]] = {False: [], True: []}
    for table_title, rows in tables.items():
        internal = bool(internal_titles) and table_title.startswith(internal_titles)
        if table_title:
            parts[internal] += [f"### {table_title}", ""]
        parts[internal] += [markdown(rows), ""]
    sections = []
    for internal, notes_name in ((False, "NOTES"), (True, "INTERNAL_NOTES")):
        if not parts[internal]:
            sections.append("")
            continue
        body = [heading, ""]
        if intro and not internal:
            body += [intro, ""]
        body += parts[internal]
        notes = getattr(module, notes_name, "")
        if notes:
            body += [inspect.cleandoc(notes), ""]
        sections.append("\n".join(body))
    return sections[0], sections[1]


SMOKE = (
    "SMOKE RUN: tiny sizes, one repeat. These numbers are not results; "
    "benchmarks/README.md and benchmarks/results/ hold the measured ones."
)


def tables(write: bool) -> int:
    """Write (or check) the tables and charts the results files give."""
    import pages

    if write:
        for path in pages.write():
            print(f"wrote {path.relative_to(ROOT)}", file=sys.stderr)
        return 0
    stale = pages.stale()
    for path in stale:
        print(
            f"stale: {path.relative_to(ROOT)} (python benchmarks/run.py --tables)",
            file=sys.stderr,
        )
    return 1 if stale else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="fewer repeats and sizes")
    mode.add_argument(
        "--smoke", action="store_true", help="tiny sizes, one repeat, every module"
    )
    parser.add_argument(
        "--only",
        action="append",
        help="run only this module, by name or path to a .py file (repeatable)",
    )
    parser.add_argument(
        "--write", action="store_true", help="write the pages even with --quick"
    )
    parser.add_argument(
        "--out", type=Path, default=HERE / "README.md", help="users' page to write"
    )
    parser.add_argument(
        "--internals",
        type=Path,
        default=HERE / "internals.md",
        help="developers' page to write",
    )
    parser.add_argument(
        "--tables",
        action="store_true",
        help="write the generated tables and charts from benchmarks/results/",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if a generated table differs from benchmarks/results/",
    )
    args = parser.parse_args()

    sys.path.insert(0, str(HERE))
    if args.tables or args.check:
        return tables(write=args.tables)
    names = sorted(
        (p.stem for p in HERE.glob("bench_*.py")),
        key=lambda n: (FIRST.index(n) if n in FIRST else len(FIRST), n),
    )
    if args.only:
        known = set(names)
        names = [n for n in names if n in args.only] + [
            n for n in args.only if n not in known
        ]
    smoke_only = args.smoke and not args.write
    if smoke_only:
        # The first line a terminal shows, before the modules' progress.
        print(SMOKE, flush=True)
    start = time.perf_counter()
    top = machine()
    results = {
        name: published(name)
        if name in PUBLISHED and not args.smoke
        else run_module(name, args.quick, args.smoke)
        for name in names
    }
    failed = [name for name, result in results.items() if result is None]
    users = [r[0] for r in results.values() if r and r[0]]
    internals = [r[1] for r in results.values() if r and r[1]]
    page = f"{LEAD}\n## Machine\n\n{top}\n" + "\n".join(users).rstrip() + "\n\n" + HOWTO
    internal_page = (
        f"{INTERNAL_LEAD}\n## Machine\n\n{top}\n" + "\n".join(internals).rstrip() + "\n"
    )
    elapsed = time.perf_counter() - start
    if failed:
        print(
            f"FAILED: {', '.join(failed)} raised (tracebacks above); no page written",
            file=sys.stderr,
        )
        return 1
    done = f"all {len(names)} modules ran in {elapsed:.0f} s"
    if smoke_only:
        # Only the tables, between two lines that say what they are not: the
        # first and the last a terminal shows.
        print(done, file=sys.stderr, flush=True)
        for line in (page + internal_page).splitlines():
            if line.startswith(("#", "|")):
                print(line)
        print(SMOKE)
        return 0
    if args.quick and not args.write:
        print(page)
        print(internal_page)
    else:
        args.out.write_text(page.rstrip() + "\n")
        args.internals.write_text(internal_page.rstrip() + "\n")
        print(f"wrote {args.out} and {args.internals}", file=sys.stderr)
    print(done, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
