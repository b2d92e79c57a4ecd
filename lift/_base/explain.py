"""The Errors page read from a terminal: `python -m lift explain <anchor>`.

Every message ends with `Docs: python -m lift explain <anchor>`. The entry is
the section of `docs/errors.md` whose heading carries `{#<anchor>}`. A wheel
ships that page as `lift/errors.md`; a clone or an editable install reads
`docs/errors.md` itself. Nothing here imports JAX.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Final

from .errors import DOCS_URL

_PACKAGE: Final = Path(__file__).resolve().parent.parent
# Where the page is: the copy a wheel ships, then the clone's own.
_PAGES: Final = (_PACKAGE / "errors.md", _PACKAGE.parent / "docs" / "errors.md")

_HEADING: Final = re.compile(r"^(#{1,6}) (.*?)(?: \{#([\w-]+)\})?\s*$")
_FENCE: Final = re.compile(r"^\s*(```|~~~)")


def errors_page() -> Path:
    """The Errors page this copy of lift reads: shipped or the clone's."""
    for page in _PAGES:
        if page.is_file():
            return page
    raise FileNotFoundError(
        "lift's Errors page is missing: neither "
        + " nor ".join(str(p) for p in _PAGES)
        + " exists. Reinstall lift (`pip install --force-reinstall jax-lift`)."
    )


def _sections(text: str) -> dict[str, tuple[str, list[str]]]:
    """Each anchored heading's text and lines, up to the next heading as high.

    They come in page order. Lines inside code fences are never headings (`# a
    comment`).
    """
    found: dict[str, tuple[str, list[str]]] = {}
    open_: list[tuple[int, list[str]]] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading is not None:
            level = len(heading[1])
            while open_ and open_[-1][0] >= level:
                open_.pop()
            if heading[3] is not None:
                found[heading[3]] = (heading[2], [])
                open_.append((level, found[heading[3]][1]))
        for _, lines in open_:
            lines.append(line)
    return found


def anchors(text: str | None = None) -> dict[str, str]:
    """Every anchor of the page, with its heading's text, in page order."""
    text = errors_page().read_text(encoding="utf-8") if text is None else text
    return {anchor: heading for anchor, (heading, _) in _sections(text).items()}


def entry(anchor: str, text: str | None = None) -> str:
    """The Markdown of the page's section `anchor`, heading first.

    `anchor` may be written as in a message or a link: `errors/#leak-report`,
    `#leak-report`, or a URL ending so. A name not on the page raises
    `KeyError`, naming the closest ones.
    """
    text = errors_page().read_text(encoding="utf-8") if text is None else text
    name = anchor.rpartition("#")[2].strip()
    sections = _sections(text)
    if name not in sections:
        close = difflib.get_close_matches(name, list(sections), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise KeyError(
            f"lift's Errors page has no entry {name!r}.{hint} "
            "`python -m lift explain` lists them all."
        )
    return "\n".join(sections[name][1]).strip() + "\n"


# A code span (left as it is), a reference link `[text][id]`, or a link
# `[text](url)`; the text may hold code spans and break across lines.
_TEXT: Final = r"\[((?:`[^`]*`|[^\]`])+)\]"
_LINKS: Final = re.compile(rf"(`[^`]*`)|{_TEXT}\[[^\]]*\]|{_TEXT}\(([^)\s]+)\)")


def _link(found: re.Match[str]) -> str:
    # A code span or a reference link's text as it is; a link with its target.
    return found[1] or found[2] or f"{found[3]} ({_target(found[4])})"


def _target(url: str) -> str:
    """Where a link of the page leads, as a terminal can follow it."""
    if "://" in url:
        return url
    page, _, section = url.partition("#")
    if page in ("", "errors.md") and section:
        return f"python -m lift explain {section}"
    if DOCS_URL:
        return (
            DOCS_URL
            + page.removesuffix(".md")
            + "/"
            + (f"#{section}" if section else "")
        )
    return "docs/" + url


def render(markdown: str) -> str:
    """An entry as a terminal shows it: the heading without its `{#id}`, each
    link followed by where it leads (another entry as the command to run)."""
    out: list[str] = []
    prose: list[str] = []
    fenced = False

    def flush() -> None:
        if prose:
            out.extend(_LINKS.sub(_link, "\n".join(prose)).split("\n"))
            prose.clear()

    for line in markdown.splitlines():
        if _FENCE.match(line):
            flush()
            fenced = not fenced
            out.append(line)
            continue
        heading = None if fenced else _HEADING.match(line)
        if heading is not None:
            flush()
            title = heading[2].replace("`", "")
            out += [title, "=" * min(len(title), 79)]
        elif fenced:
            out.append(line)
        else:
            prose.append(line)
    flush()
    return "\n".join(out).rstrip() + "\n"
