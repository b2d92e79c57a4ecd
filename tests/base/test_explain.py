"""`python -m lift explain <anchor>`: every message's last line, run in a
terminal, prints its entry of the Errors page, offline, without JAX."""

from __future__ import annotations

import ast
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import lift
from lift._base import errors
from lift._base.explain import anchors, entry, errors_page, render

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "errors.md"


def _anchor_parameters(trees: list[ast.Module]) -> dict[str, int]:
    """lift's functions that take an `anchor`, with its position."""
    found: dict[str, int] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
                if "anchor" in names:
                    found[node.name] = names.index("anchor")
    return found


def _used_anchors() -> set[str]:
    """Every anchor a message of lift can end with: given by keyword, assigned
    to `anchor`, passed to `docs_anchor` or to a function's `anchor` parameter."""
    trees = [ast.parse(p.read_text()) for p in sorted((ROOT / "lift").rglob("*.py"))]
    positions = _anchor_parameters(trees)
    used: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            values: list[ast.expr] = []
            if (isinstance(node, ast.keyword) and node.arg == "anchor") or (
                isinstance(node, ast.Assign)
                and any(getattr(t, "id", None) == "anchor" for t in node.targets)
            ):
                values.append(node.value)
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else None
                if isinstance(func, ast.Attribute):
                    name = func.attr
                if name == "docs_anchor":
                    values.append(node.args[0])
                elif name in positions and len(node.args) > positions[name]:
                    values.append(node.args[positions[name]])
            used.update(
                v.value
                for v in values
                if isinstance(v, ast.Constant) and isinstance(v.value, str)
            )
    return used


def _run(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def test_every_anchor_a_message_names_has_an_entry():
    used = _used_anchors()
    # Positional ones included (`_live_or_refuse(..., "tracer-in-static-pytree-data")`).
    assert {"tracer-in-static-pytree-data", "leak-report", "options"} <= used
    assert len(used) > 40
    on_page = anchors()
    assert sorted(used - set(on_page)) == []
    for anchor in used:
        text = entry(anchor)
        heading = text.splitlines()[0]
        assert heading.startswith("#") and heading.endswith(f"{{#{anchor}}}")
        assert len(text.splitlines()) > 3, anchor


def test_an_entry_ends_at_the_next_heading_and_keeps_code_comments():
    text = entry("leak-report")
    assert text.startswith("### `N tracers escaped")
    assert "{#leak-unseen}" not in text
    assert "| captured variable |" in text
    page = "### A {#a}\n\nfirst\n\n```python\n# not a heading\n```\n\n## B\n\nsecond\n"
    assert (
        entry("a", page) == "### A {#a}\n\nfirst\n\n```python\n# not a heading\n```\n"
    )


def test_the_page_read_is_the_checkouts_own_here():
    # A wheel ships it as lift/errors.md (tests/test_packaging.py checks it there).
    assert errors_page() == PAGE


def test_rendering_drops_ids_and_says_where_each_link_leads():
    shown = render(
        "### `f` rebinds {#x}\n\n[`lift.replace`][lift.replace] and "
        "[below](#hidden-tracer), the\n[guide](guides/jit.md#a), "
        "`[*rows][0].append(x)`.\n"
    )
    assert shown.splitlines()[:2] == ["f rebinds", "========="]
    assert "`lift.replace` and below (python -m lift explain hidden-tracer)" in shown
    assert "guide (docs/guides/jit.md#a)" in shown
    assert "`[*rows][0].append(x)`" in shown


def test_a_messages_docs_line_run_in_a_terminal_prints_its_entry():
    with pytest.raises(lift.LiftError) as info:
        lift.lift(int)
    last = str(info.value).splitlines()[-1]
    assert last == "Docs: python -m lift explain lift-got-a-class"
    command = shlex.split(last.removeprefix("Docs: "))
    assert command[:2] == ["python", "-m"]
    done = _run(*command[1:], env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("lift() got the class …\n======")
    assert "**Fix:** lift a bound method" in done.stdout


def test_explain_lists_the_anchors_and_names_the_closest_to_a_typo():
    listed = _run("-m", "lift", "explain", env={"PYTHONPATH": str(ROOT)})
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert names == list(anchors())
    typo = _run("-m", "lift", "explain", "leak-reprot", env={"PYTHONPATH": str(ROOT)})
    assert typo.returncode == 2
    assert "no entry 'leak-reprot'. Did you mean leak-report" in typo.stderr
    # As a message or a link writes it.
    assert entry("errors/#leak-report") == entry("leak-report")


def test_explain_imports_no_jax():
    check = (
        "import sys, io, contextlib\n"
        "from lift.__main__ import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    assert main(['explain', 'mutates-a-rebuilt-container', '--markdown']) == 0\n"
        "assert out.getvalue().startswith('### `')\n"
        "assert 'jax' not in sys.modules, 'explain imported JAX'\n"
    )
    done = _run("-c", check, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr


def test_the_hosted_address_is_one_constant(monkeypatch: pytest.MonkeyPatch):
    assert errors.DOCS_URL == ""  # no site yet: the command alone
    monkeypatch.setattr(errors, "DOCS_URL", "https://lift.example/")
    err = lift.LiftError("bad.", anchor="options")
    assert str(err).endswith(
        "\nDocs: python -m lift explain options, or https://lift.example/errors/#options"
    )
    assert err.anchor == "options"
