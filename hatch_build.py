"""The wheel ships the Errors page as `lift/errors.md`: every message's last
line, `Docs: python -m lift explain <anchor>`, prints an entry of it.

Only the wheel a release publishes: an editable install reads `docs/errors.md`
in the clone, and a file force-included there would land in site-packages as a
stray `lift/` folder. The sdist has `docs/`, so a wheel built from it ships it.
"""

from __future__ import annotations

from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class ErrorsPage(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "standard":
            build_data["force_include"]["docs/errors.md"] = "lift/errors.md"
