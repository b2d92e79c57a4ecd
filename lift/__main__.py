"""`python -m lift explain <anchor>`: the Errors page's entry a message names.

Every message of lift ends with `Docs: python -m lift explain <anchor>`. The
entry is printed from the copy of `docs/errors.md` shipped in the package, so
it reads offline. Without an anchor, the command lists them all.
"""

from __future__ import annotations

import argparse
import os
import sys

from ._base.explain import anchors, entry, render
from ._version import __version__


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return its exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m lift",
        description="Explain a lift error: print its entry of the Errors page.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    commands = parser.add_subparsers(dest="command", required=True)
    explain = commands.add_parser(
        "explain",
        help="print the entry a message's `Docs:` line names",
        description="Print the Errors page's entry for ANCHOR (the last word "
        "of a message); list the anchors without one.",
    )
    explain.add_argument("anchor", nargs="?", help="e.g. leak-report")
    explain.add_argument(
        "--markdown", action="store_true", help="print the entry's Markdown as is"
    )
    args = parser.parse_args(argv)
    if args.anchor is None:
        for name, heading in anchors().items():
            print(f"{name:34} {heading.replace('`', '')}")
        return 0
    try:
        text = entry(args.anchor)
    except KeyError as err:
        print(err.args[0], file=sys.stderr)
        return 2
    print(text if args.markdown else render(text), end="")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `python -m lift explain | head`: as Python's docs say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
