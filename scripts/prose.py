"""Measure the docstrings of `lift/`: words per sentence, and code lines.

    python scripts/prose.py            # the summary
    python scripts/prose.py --long 30  # also every sentence over 30 words
    python scripts/prose.py --check    # fail over the sentence bounds (CI)
    python scripts/prose.py --check-code  # fail over the code-line bound too

A sentence ends at `.`, `?` or `!` followed by a space or the end, or at the
end of a paragraph or list item. Code blocks and doctest lines are skipped.
Code lines are the lines of `lift/` that are not blank, comments or
docstrings.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import statistics
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEDIAN_MAX = 12
LONGEST = 40
CODE_LINES_MAX = 10_243
_END = re.compile(r"(?<=[.?!])\s+(?=[`(\"'A-Z0-9*_-])")


def _docstrings(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(
            node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        ):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                yield node, doc


def _paragraphs(doc: str):
    block: list[str] = []
    fenced = False
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            continue
        code = fenced or line.startswith("    ") or stripped.startswith(">>>")
        if code or not stripped or stripped.startswith(("- ", "* ")):
            if block:
                yield " ".join(block)
            block = []
            if stripped and not code:
                block = [stripped[2:]]
            continue
        block.append(stripped)
    if block:
        yield " ".join(block)


def sentences(path: Path):
    """(line, words, text) for each docstring sentence of one file."""
    for node, doc in _docstrings(ast.parse(path.read_text())):
        line = getattr(node, "lineno", 1)
        for paragraph in _paragraphs(doc):
            for sentence in _END.split(paragraph):
                words = len(sentence.split())
                if words:
                    yield line, words, sentence


def code_lines(path: Path) -> int:
    source = path.read_text()
    docs = set()
    for _, doc_node in (
        (n, n.body[0])
        for n in ast.walk(ast.parse(source))
        if isinstance(
            n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        )
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
        and isinstance(n.body[0].value.value, str)
    ):
        docs.update(
            range(doc_node.lineno, (doc_node.end_lineno or doc_node.lineno) + 1)
        )
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (
            tokenize.COMMENT,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            continue
        for n in range(tok.start[0], tok.end[0] + 1):
            if n not in docs:
                lines.add(n)
    return len(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--long", type=int, default=None, help="list sentences over N words"
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 over the sentence bounds"
    )
    parser.add_argument(
        "--check-code", action="store_true", help="and over the code-line bound"
    )
    parser.add_argument("paths", nargs="*", type=Path)
    args = parser.parse_args()
    files = sorted(
        p
        for root in (args.paths or [ROOT / "lift"])
        for p in ([root] if root.is_file() else root.rglob("*.py"))
    )
    counts: list[int] = []
    for path in files:
        for line, words, text in sentences(path):
            counts.append(words)
            if args.long is not None and words > args.long:
                print(f"{path.relative_to(ROOT)}:{line}: {words} words: {text}")
    code = sum(code_lines(p) for p in files)
    median = statistics.median(counts) if counts else 0
    longest = max(counts, default=0)
    print(
        f"{len(counts)} docstring sentences: median {median:g} words (at most {MEDIAN_MAX}), "
        f"longest {longest} (at most {LONGEST}), "
        f"{sum(c > LONGEST for c in counts)} over; {code} code lines (at most {CODE_LINES_MAX})"
    )
    over = median > MEDIAN_MAX or longest > LONGEST
    if args.check_code and not args.paths:
        over = over or code > CODE_LINES_MAX
    if (args.check or args.check_code) and over:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
