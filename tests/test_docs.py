"""Every code example in the documentation runs, and shows what it prints.

The collector reads `README.md` and every page under `docs/`, and runs each page's
fenced ```python blocks in order, in one namespace per page (a page reads like a
session: later blocks use what earlier ones defined). Conventions, for writers:

- Output. A ```text block that follows a ```python block with nothing but blank
  lines between them is that block's expected standard output. It is compared
  line by line (trailing spaces ignored); `...` matches anything, as in doctest's
  ELLIPSIS, for file paths, line numbers and addresses. Put a sentence between
  the two blocks when a text block is not output.
- Skipping. A block that must not run (it needs a GPU, the network, a real
  training run) is preceded by the line `<!-- skip -->`. Use it sparingly: a
  skipped example can rot.
- Line numbers. Blocks are compiled with the page's path and their lines in the
  page, so a traceback (and any `file:line` that lift prints) points at the
  Markdown source.
- File names. A block titled with a Python file name (```` ```python
  title="train.py" ````, which the site shows above the block) is compiled as
  that file, its lines counted from 1: an example that prints a `file:line`
  then shows the reader's own file, not the docs page.
- Included files. A line `--8<-- "path"` (pymdownx.snippets, as the site
  renders it) is replaced by the file at `path`, relative to the repository,
  indented as the line is: a page that shows a script runs the script's code.
  The namespace's `__file__` is the page.
- Requirements. A page written against a library the test extra cannot always
  install (a release that needs a newer JAX than the oldest lift supports)
  says so on a line of its own, `<!-- requires: blackjax>=1.7 -->`; where that
  library is missing or older, the page's test is skipped, and the skip says
  which version was found.
- Environment. Pages run as a user runs them: with JAX's own tracer-leak checking
  off (the suite turns it on for every other test), since the leak-checking
  guide has to leak on purpose. Pages that show leak checking turn it on where
  they say so (`with jax.checking_leaks():`).

The examples in the docstrings of public names, which the API reference
renders, run the same way, one namespace per docstring. The last tests check
that every public name has a runnable example and an entry in the API reference.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import doctest
import importlib.metadata
import inspect
import io
import os
import re
from pathlib import Path

import jax
import pytest

import lift

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
API = DOCS / "api"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")
_SKIP = "<!-- skip -->"
_REQUIRES = re.compile(
    r"^<!-- requires: (?P<name>[\w.-]+)>=(?P<version>[\w.]+) -->$", re.MULTILINE
)
_TITLE = re.compile(r'\btitle="(?P<title>[^"]+\.py)"')
_SNIPPET = re.compile(
    r'^(?P<indent>[ \t]*)--8<-- "(?P<path>[^"]+)"[ \t]*$', re.MULTILINE
)


@dataclasses.dataclass(frozen=True)
class Block:
    lang: str
    first_line: int  # 1-based line of the block's first code line in the page
    code: str
    skip: bool
    output: str | None = None
    filename: str | None = None  # compile as this file, from line 1


def _pages() -> list[Path]:
    pages = sorted(DOCS.rglob("*.md"))
    readme = ROOT / "README.md"
    if readme.exists():
        pages.insert(0, readme)
    return pages


def expand_snippets(text: str) -> str:
    """The page as the site shows it: each `--8<-- "path"` line replaced by the file."""

    def include(match: re.Match[str]) -> str:
        indent = match["indent"]
        body = (ROOT / match["path"]).read_text().splitlines()
        return "\n".join(indent + line if line else line for line in body)

    return _SNIPPET.sub(include, text)


def parse_blocks(text: str) -> list[Block]:
    """Fenced blocks of a Markdown page, each python block with its output."""
    lines = expand_snippets(text).splitlines()
    raw: list[tuple[Block, int]] = []  # each block with the index of its closing line
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, fence = match["indent"], match["fence"]
        lang = match["info"].strip().split(" ")[0].lower()
        title = _TITLE.search(match["info"])
        previous = next((line for line in reversed(lines[:i]) if line.strip()), "")
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            stripped = lines[j].strip()
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                break
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else "")
            j += 1
        block = Block(
            lang,
            i + 2,
            "\n".join(body) + "\n",
            previous.strip() == _SKIP,
            filename=title["title"] if title else None,
        )
        raw.append((block, j))
        i = j + 1

    blocks: list[Block] = []
    for n, (block, end) in enumerate(raw):
        if block.lang == "python" and n + 1 < len(raw):
            following, _ = raw[n + 1]
            between = lines[end + 1 : following.first_line - 2]
            if following.lang == "text" and not any(line.strip() for line in between):
                block = dataclasses.replace(block, output=following.code)
        blocks.append(block)
    return blocks


def _same_output(want: str, got: str) -> bool:
    def tidy(s: str) -> str:
        return "\n".join(line.rstrip() for line in s.strip("\n").splitlines()) + "\n"

    return doctest.OutputChecker().check_output(tidy(want), tidy(got), doctest.ELLIPSIS)


@contextlib.contextmanager
def _as_a_user_runs_it():
    before = jax.config.jax_check_tracer_leaks
    jax.config.update("jax_check_tracer_leaks", False)
    # Processes a page starts run without lift's fast-path check, as a user's
    # do.
    verify = os.environ.pop("LIFT_VERIFY", None)
    try:
        yield
    finally:
        jax.config.update("jax_check_tracer_leaks", before)
        if verify is not None:
            os.environ["LIFT_VERIFY"] = verify


def _run_blocks(text: str, filename: str, label: str) -> int:
    namespace: dict[str, object] = {"__name__": "__docs__", "__file__": filename}
    ran = 0
    for block in parse_blocks(text):
        if block.lang != "python" or block.skip:
            continue
        where = f"{label}:{block.first_line}"
        source = block.filename or filename
        tree = ast.parse(block.code, filename=source)
        if block.filename is None:
            ast.increment_lineno(tree, block.first_line - 1)
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            try:
                # `dont_inherit`: compiled as the reader's own code, without this
                # file's `from __future__ import annotations` (which would make a
                # page's dataclass annotations strings).
                code = compile(tree, source, "exec", dont_inherit=True)
                exec(code, namespace)
            except Exception as e:
                raise AssertionError(f"the example at {where} raised {e!r}") from e
        if block.output is not None and not _same_output(
            block.output, stdout.getvalue()
        ):
            raise AssertionError(
                f"the example at {where} printed\n{stdout.getvalue()}\n"
                f"but the page shows\n{block.output}"
            )
        ran += 1
    return ran


def _require(name: str, version: str, page: Path) -> None:
    """Skip `page`, saying why, unless distribution `name` >= `version` is installed."""
    try:
        found = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{page} needs {name}>={version}, which is not installed")
    if _release(found) < _release(version):
        pytest.skip(f"{page} needs {name}>={version}, and {name} {found} is installed")


def _release(version: str) -> tuple[int, ...]:
    """`1.7.1` as `(1, 7, 1)`: the leading numbers of a version string."""
    numbers = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(n) for n in numbers[0].split(".")) if numbers else ()


def _public() -> list[str]:
    return [name for name in lift.__all__ if not name.startswith("__")]


def _docstring(name: str) -> str:
    return inspect.cleandoc(getattr(lift, name).__doc__ or "")


# The leak guide leaks on purpose (and `--lift-leaks` would say so).
@pytest.mark.lift_allow_leaks
@pytest.mark.parametrize(
    "path", _pages(), ids=lambda p: str(p.relative_to(ROOT)).replace("/", "-")
)
def test_examples_run(path: Path):
    text = path.read_text()
    for need in _REQUIRES.finditer(text):
        _require(need["name"], need["version"], path.relative_to(ROOT))
    with _as_a_user_runs_it():
        _run_blocks(text, str(path), str(path.relative_to(ROOT)))


# The examples of `checked`, `find_leaks` and `Leak` leak on purpose.
@pytest.mark.lift_allow_leaks
@pytest.mark.parametrize(
    "name", [name for name in _public() if "```python" in _docstring(name)]
)
def test_docstring_examples_run(name: str):
    # The API reference renders docstrings, examples included: they run too.
    with _as_a_user_runs_it():
        _run_blocks(_docstring(name), f"<docstring of lift.{name}>", f"lift.{name}")


def test_every_public_name_has_an_example():
    code = [
        block.code
        for text in [p.read_text() for p in _pages()] + list(map(_docstring, _public()))
        for block in parse_blocks(text)
        if block.lang == "python" and not block.skip
    ]
    used = set(re.findall(r"\blift\.(\w+)", "\n".join(code)))
    assert sorted(set(_public()) - used) == [], (
        "public names without a runnable example"
    )


def _documented(text: str) -> set[str]:
    """Public names with an entry (`::: lift.name`) in `text`. An entry of a class
    method (`::: lift.Lifted.closure_convert`) documents the public name that is
    that method (`lift.closure_convert`)."""
    names: set[str] = set()
    for path in re.findall(r"^::: lift\.([\w.]+)\s*$", text, flags=re.MULTILINE):
        *owner, name = path.split(".")
        if owner[:1] == ["flax"]:
            continue  # `lift.flax`, a module of its own: not in `lift.__all__`
        if not owner:
            names.add(name)
            continue
        entry = getattr(getattr(lift, ".".join(owner)), name)
        names |= {n for n in lift.__all__ if getattr(lift, n) == entry}
    return names


def test_api_reference_lists_every_public_name():
    text = "\n".join(page.read_text() for page in sorted(API.glob("*.md")))
    documented = _documented(text)
    public = set(_public())
    assert sorted(public - documented) == [], "public names missing from docs/api"
    assert sorted(documented - set(lift.__all__)) == [], "docs/api names not public"
    # Attributes without a docstring of their own are named in the text instead.
    for name in set(lift.__all__) - public:
        assert f"lift.{name}" in text, f"lift.{name} is not mentioned in docs/api"


def test_collector_conventions():
    page = "\n".join(
        [
            "```python",
            "print(1)",
            "```",
            "",
            "```text",
            "1",
            "```",
            "",
            "<!-- skip -->",
            "```python",
            "raise SystemExit",
            "```",
            "Not output:",
            "```text",
            "x",
            "```",
            "    ```python",
            "    y = 2",
            "    ```",
        ]
    )
    blocks = parse_blocks(page)
    assert [(b.lang, b.first_line, b.skip) for b in blocks] == [
        ("python", 2, False),
        ("text", 6, False),
        ("python", 11, True),
        ("text", 15, False),
        ("python", 18, False),
    ]
    assert blocks[0].output == "1\n"
    assert blocks[2].output is None
    assert blocks[4].code == "y = 2\n"
    assert _same_output("a ... c\n", "a (file.py:12) c")
    assert not _same_output("1\n", "2\n")


def test_api_summary_lists_every_public_name():
    # One table, in optax's style, each name linking to its entry.
    text = (API / "index.md").read_text()
    linked = set(re.findall(r"\]\[lift\.(\w+)\]", text))
    assert sorted(set(_public()) - linked) == [], "names missing from the API summary"


def test_pages_requiring_a_library_skip_saying_which_version_is_found():
    page = (
        "<!-- requires: pytest>=8 -->\n# A page\n<!-- requires: no-such-dist>=1.0 -->"
    )
    assert [m.groups() for m in _REQUIRES.finditer(page)] == [
        ("pytest", "8"),
        ("no-such-dist", "1.0"),
    ]
    _require("pytest", "8", Path("page.md"))  # installed: no skip
    with pytest.raises(
        pytest.skip.Exception, match=r"page\.md needs pytest>=999, and pytest \d"
    ):
        _require("pytest", "999", Path("page.md"))
    with pytest.raises(
        pytest.skip.Exception, match=r"no-such-dist>=1\.0, which is not installed"
    ):
        _require("no-such-dist", "1.0", Path("page.md"))
    assert _release("1.7.1") == (1, 7, 1)
    assert _release("0.12.0.1") > _release("0.9")


def test_block_titles_and_included_files():
    page = "\n".join(
        [
            '```python title="train.py"',
            "import inspect",
            "print(inspect.currentframe().f_code.co_filename, inspect.currentframe().f_lineno)",
            "```",
            "",
            "```text",
            "train.py 2",
            "```",
            "",
            '    --8<-- "LICENSE"',
        ]
    )
    blocks = parse_blocks(page)
    assert blocks[0].filename == "train.py"
    assert _run_blocks(page, "page.md", "page.md") == 1
    assert "    Apache License" in expand_snippets(page)


def test_benchmarks_page_opens_with_the_comparison_users_make():
    # benchmarks/run.py writes the page: the sweep against plain optax,
    # inject_hyperparams and closure_to_pytree first; the project's own goals
    # and their history are on the developers' page.
    text = (ROOT / "benchmarks" / "README.md").read_text()
    sections = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert sections[0] == "Machine"
    assert "bench_optax.py" in sections[1]
    first_table = text[text.index("\n### ", text.index(sections[1])) :]
    first_table = first_table[: first_table.index("\n\n", first_table.index("| way"))]
    assert first_table.startswith("\n### Sweep:")
    for way in ("plain optax", "closure_to_pytree", "inject_hyperparams", "lift"):
        assert f"| {way}" in first_table
    assert sections.index("Regenerating this page") == len(sections) - 1
    assert not any("against 0.1.0" in s or s == "Goals" for s in sections)
    assert "### Goals" in (ROOT / "benchmarks" / "internals.md").read_text()
    assert "against 0.1.0" in (ROOT / "benchmarks" / "versions.md").read_text()
