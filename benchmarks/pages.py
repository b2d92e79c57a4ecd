"""The tables and charts written from the results files.

`benchmarks/results/NAME.json` holds what one run of `bench_accelerator.py`
measured (`NAME-DATE.json`: an earlier run of the same machine). From them
`python benchmarks/run.py --tables` writes:

- `benchmarks/results/NAME.md`, every table of the run;
- `docs/assets/bench-NAME.png`, the decision numbers as a chart;
- each region of the Markdown pages marked
  `<!-- generated: WHAT ARGS -->` ... `<!-- /generated -->`.

Prose outside the regions states no measured number, so the pages cannot
drift from the results: `tests/test_benchmarks.py` fails when a region or a
results page differs from what the files give.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
ASSETS = ROOT / "docs" / "assets"
# The pages that hold generated regions.
PAGES = ("README.md", "docs/*.md", "docs/**/*.md", "benchmarks/*.md")

Rows = list[dict[str, Any]]
# The multiplication sign of the tables' sizes (8 rates by 200 steps).
X = "\N{MULTIPLICATION SIGN}"

# The ways of a sweep users choose between, in the order the tables show.
DECIDING = ("plain optax", "inject_hyperparams", "lift.lift", "lift.jit")
SCHEDULE_WAYS = {
    "inject_hyperparams(adam)(learning_rate=schedule)": "inject_hyperparams",
    "lift.lift(adam(schedule))": "lift.lift",
}


# -- numbers -----------------------------------------------------------------


def fmt(seconds: float) -> str:
    """A duration with three significant figures at most."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1e-2:
        return f"{seconds * 1e3:.2f} ms"
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    return f"{seconds:.2f} s"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 'es' if word.endswith('s') else 's'}"


def markdown(rows: Rows) -> str:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---" for _ in keys) + "|"]
    lines += [
        "| " + " | ".join(str(row.get(k, "")) for k in keys) + " |" for row in rows
    ]
    return "\n".join(lines)


def _by_way(rows: Rows) -> dict[str, dict[str, Any]]:
    return {row["way"]: row for row in rows}


def _schedule(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {SCHEDULE_WAYS.get(row["way"]) or row["way"]: row for row in r["schedule"]}


def load(r: dict[str, Any]) -> str:
    """The load average over the run, where it was recorded."""
    if not r.get("load") or None in r["load"]:
        return ""
    values = [x[0] for x in r["load"]]
    return f"load average {min(values):.1f} to {max(values):.1f}"


def machine(r: dict[str, Any]) -> str:
    """Where, when and with what the run measured, as a phrase."""
    if r["device_kind"] == "TPU v5 lite":
        where = "one TPU v5e chip"
    elif r["platform"] == "cpu":
        cores = r.get("cpu_count")
        where = f"a {cores}-core CPU" if cores else "a CPU"
    else:
        where = f"one {r['device_kind']}"
    parts = [f"JAX {r['jax']}", f"Python {r['python']}", r["date"]]
    if load(r):
        parts.append(load(r))
    return f"{where} ({', '.join(parts)})"


# -- bench_accelerator.py's tables --------------------------------------------


def tables(r: dict[str, Any]) -> dict[str, Rows]:
    """Every table of one run of `bench_accelerator.py`, by title."""
    s = r["sizes"]
    n, steps = s["sweep"]
    model = f"MLP {s['depth']} x {s['width']}, batch {s['batch']}"
    plain = _by_way(r["sweep"])["plain optax"]
    out: dict[str, Rows] = {}
    out[f"Sweep: {n} rates x {steps} adamw steps, {model}"] = [
        {
            "way": row["way"],
            "compiles": row["compiles"],
            "wall": fmt(row["wall_s"]),
            "vs plain": f"{row['wall_s'] / plain['wall_s']:.2f}",
            "best loss": f"{min(row['final_losses']):.3g}",
        }
        for row in r["sweep"]
    ]
    n, steps, width = s["long"]
    first = r["long"][0]
    out[f"Longer: {n} rates x {steps:,} steps, width {width}"] = [
        {
            "way": row["way"],
            "compiles": row["compiles"],
            "wall": fmt(row["wall_s"]),
            "vs one after another": f"{row['wall_s'] / first['wall_s']:.2f}",
        }
        for row in r["long"]
    ]
    n, steps = s["schedule"]
    inject = r["schedule"][0]
    out[f"Warmup-cosine schedule: {n} peaks x {steps} adam steps"] = [
        {
            "way": row["way"],
            "compiles": row["compiles"],
            "wall": fmt(row["wall_s"]),
            "vs inject": f"{row['wall_s'] / inject['wall_s']:.2f}",
        }
        for row in r["schedule"]
    ]
    base = r["steady"][0]["step_s"]
    n_rates = s["sweep"][0]
    out[
        "Steady state: a step after warmup (median; vs plain: the ratio of the medians shown)"
    ] = [
        {
            "way": row["way"]
            + (f" ({n_rates} rates a step)" if "vmap" in row["way"] else ""),
            "a step": fmt(row["step_s"]),
            "vs plain": f"{row['step_s'] / base:.2f}",
        }
        for row in r["steady"]
    ]
    n, steps = s["cache"]
    first, second = r["cache"]["first"], r["cache"]["second"]
    ways = [w for w in first if isinstance(first[w], dict)]
    out[f"Persistent cache: two processes, {n} new rate{'s' * (n != 1)} each"] = [
        {
            "way": way,
            "1st: misses": first[way]["misses"],
            "1st: wall": fmt(first[way]["wall_s"]),
            "2nd: hits, misses": f"{second[way]['hits']}, {second[way]['misses']}",
            "2nd: wall": fmt(second[way]["wall_s"]),
        }
        for way in ways
    ]
    return out


def report(r: dict[str, Any]) -> str:
    """A run's results as Markdown: what ran where, then the tables."""
    devices = f"{r['device_count']} device{'s' if r['device_count'] != 1 else ''}"
    parts = [
        f"Measured on {machine(r)}, the first of {devices}; optax {r['optax']}, "
        f"lift {r['lift']}; `--size {r['size']}`. Walls include every compile; a "
        "compile is one XLA compile (a persistent-cache hit counts as one).",
        "",
    ]
    for title, rows in tables(r).items():
        parts += [f"### {title}", "", markdown(rows), ""]
    return "\n".join(parts)


# -- the results files ---------------------------------------------------------


def results() -> dict[str, dict[str, Any]]:
    """Every run of `bench_accelerator.py` by name (`tpu-v5e`,
    `tpu-v5e-2026-12-06`, ...); other modules' results files are their own."""
    found = {
        path.stem: json.loads(path.read_text())
        for path in sorted(RESULTS.glob("*.json"))
    }
    return {stem: result for stem, result in found.items() if "cache" in result}


def runs_of(name: str, found: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of one machine, oldest first: `NAME-DATE.json` then `NAME.json`."""
    runs = [r for stem, r in found.items() if stem.startswith(f"{name}-")]
    return [*sorted(runs, key=lambda r: r["date"]), found[name]]


# -- the regions -----------------------------------------------------------------


def _cell(row: dict[str, Any] | None, what: str = "compiles") -> str:
    if row is None:
        return "not measured"
    if what == "compiles":
        return f"{fmt(row['wall_s'])}, {plural(row['compiles'], 'compile')}"
    hits, misses = row["hits"], row["misses"]
    count = plural(hits, "hit") if hits and not misses else plural(misses, "miss")
    return f"{fmt(row['wall_s'])}, {count}"


def headline(found: dict[str, dict[str, Any]], *names: str) -> str:
    """The first screen's table: each machine's rate sweep, then its second
    process on the persistent cache."""
    head = "| | " + " | ".join(
        f"`{w}`" if "." in w or "_" in w else w for w in DECIDING
    )
    lines = [head + " |", "|---" * (len(DECIDING) + 1) + "|"]
    notes = []
    for name in names:
        r = found[name]
        s = r["sizes"]
        n, steps = s["sweep"]
        label = "TPU v5e" if r["platform"] == "tpu" else "CPU"
        sweep = _by_way(r["sweep"])
        lines.append(
            f"| {label}: {n} rates {X} {steps} steps, MLP {s['depth']} {X} {s['width']}"
            f", batch {s['batch']}, adamw | "
            + " | ".join(_cell(sweep.get(w)) for w in DECIDING)
            + " |"
        )
        second = r["cache"]["second"]
        m = s["cache"][0]
        lines.append(
            f"| {label}: a second process, {m} new rates, persistent cache | "
            + " | ".join(_cell(second.get(w), "cache") for w in DECIDING)
            + " |"
        )
        notes.append(machine(r))
    return "\n".join(lines) + "\n\nMeasured on " + " and ".join(notes) + "."


def decision(found: dict[str, dict[str, Any]], name: str) -> str:
    """One machine's decision numbers by way: the rate sweep, the schedule
    sweep, the second process on the persistent cache, the steady step."""
    r = found[name]
    s = r["sizes"]
    sweep, schedule = _by_way(r["sweep"]), _schedule(r)
    second = r["cache"]["second"]
    steady = _by_way(r["steady"])
    base = steady["plain optax"]["step_s"]
    n, steps = s["sweep"]
    peaks, schedule_steps = s["schedule"]
    rows = [
        {
            "way": f"`{way}`" if way != "plain optax" else way,
            f"{n} rates {X} {steps} steps": _cell(sweep.get(way)),
            f"schedule: {peaks} peaks {X} {schedule_steps} steps": _cell(
                schedule.get(way)
            ),
            f"2nd process, {s['cache'][0]} new rates": _cell(second.get(way), "cache"),
            "a step, vs plain": f"{steady[way]['step_s'] / base:.2f}",
        }
        for way in DECIDING
    ]
    return (
        markdown(rows)
        + f"\n\nMLP {s['depth']} {X} {s['width']}, batch {s['batch']}, adamw; measured on "
        + f"{machine(r)}."
    )


def spread(found: dict[str, dict[str, Any]], name: str) -> str:
    """Every run of one machine: the rate sweep and the schedule sweep by way,
    plain optax left out."""
    rows = []
    for r in runs_of(name, found):
        sweep, schedule = _by_way(r["sweep"]), _schedule(r)
        row: dict[str, Any] = {"run": r["date"]}
        for way in (*DECIDING[1:], "lift + vmap"):
            row[f"rate sweep: `{way}`"] = fmt(sweep[way]["wall_s"])
        for way in ("inject_hyperparams", "lift.lift"):
            row[f"schedule: `{way}`"] = fmt(schedule[way]["wall_s"])
        if r.get("load"):
            row["load average"] = load(r).removeprefix("load average ")
        rows.append(row)
    return markdown(rows)


REGIONS: dict[str, Callable[..., str]] = {
    "headline": headline,
    "decision": decision,
    "spread": spread,
}

_REGION = re.compile(
    r"(<!-- generated: (?P<what>[^>]*?) -->\n)(?P<body>.*?)(<!-- /generated -->)",
    re.DOTALL,
)


def _pages() -> Iterator[Path]:
    seen = set()
    for pattern in PAGES:
        for path in sorted(ROOT.glob(pattern)):
            if path not in seen and "generated:" in path.read_text():
                seen.add(path)
                yield path


def regenerate(text: str, found: dict[str, dict[str, Any]]) -> str:
    """The text with each generated region written anew."""

    def fill(match: re.Match[str]) -> str:
        what, *args = match["what"].split()
        if what not in REGIONS:
            raise ValueError(f"unknown generated region {what!r}")
        body = REGIONS[what](found, *args).rstrip() + "\n"
        return match[1] + body + match[4]

    return _REGION.sub(fill, text)


def expected() -> dict[Path, str]:
    """What each generated file and page should read, by path."""
    found = results()
    out = {
        RESULTS / f"{stem}.md": report(r)
        for stem, r in found.items()
        if (RESULTS / f"{stem}.md").exists() or not re.search(r"-\d{4}-", stem)
    }
    for path in _pages():
        out[path] = regenerate(path.read_text(), found)
    return out


def stale() -> list[Path]:
    """The files whose text differs from what the results files give."""
    return [
        path
        for path, text in expected().items()
        if not path.exists() or path.read_text() != text
    ]


# -- charts --------------------------------------------------------------------


def chart(r: dict[str, Any], path: Path) -> None:
    """The decision numbers of one run as a PNG: the rate sweep, the schedule
    sweep and the second process on the persistent cache, wall time by way."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = r["sizes"]
    sweep, schedule = _by_way(r["sweep"]), _schedule(r)
    second = r["cache"]["second"]
    panels = [
        (
            f"{s['sweep'][0]} learning rates {X} {s['sweep'][1]} steps",
            [
                (w, sweep[w]["wall_s"], plural(sweep[w]["compiles"], "compile"))
                for w in (*DECIDING, "lift + vmap")
                if w in sweep
            ],
        ),
        (
            f"warmup-cosine schedule, {s['schedule'][0]} peaks",
            [
                (w, schedule[w]["wall_s"], plural(schedule[w]["compiles"], "compile"))
                for w in DECIDING
                if w in schedule
            ],
        ),
        (
            f"a second process, {s['cache'][0]} new rates,\npersistent cache",
            [
                (w, second[w]["wall_s"], _cell(second[w], "cache").split(", ")[1])
                for w in DECIDING
                if w in second
            ],
        ),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), layout="constrained")
    colours = {"plain optax": "#9e9e9e", "inject_hyperparams": "#5c8fd6"}
    for ax, (title, bars) in zip(axes, panels, strict=True):
        names = [b[0] for b in bars][::-1]
        walls = [b[1] for b in bars][::-1]
        notes = [b[2] for b in bars][::-1]
        ax.barh(names, walls, color=[colours.get(n, "#f2a81d") for n in names])
        for y, (wall, note) in enumerate(zip(walls, notes, strict=True)):
            ax.text(wall, y, f" {fmt(wall)}, {note}", va="center", fontsize=9)
        ax.set_xlim(0, max(walls) * 1.6)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("wall time with compiles (s)")
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(f"Measured on {machine(r)}", fontsize=10)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def write(charts: bool = True) -> list[Path]:
    """Write every generated file, page and chart; returns what changed."""
    changed = []
    for path, text in expected().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    if charts:
        for stem, r in results().items():
            if not re.search(r"-\d{4}-", stem):
                path = ASSETS / f"bench-{stem}.png"
                chart(r, path)
                changed.append(path)
    return changed
