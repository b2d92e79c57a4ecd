"""Griffe extensions for the API reference (mkdocs.yml loads them by path).

`ResolveConstantDefaults`: a parameter whose default names a module constant
(`limit: int = DEFAULT_LIMIT`) is shown with the constant's value
(`limit: int = 2_000_000`), since the constant itself is private to its module and
has no page to link to.
"""

from __future__ import annotations

from typing import Any

import griffe


class ResolveConstantDefaults(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._visit(pkg)

    def _visit(self, obj: griffe.Object) -> None:
        for member in obj.members.values():
            if member.is_alias:
                continue
            if member.is_function:
                self._resolve(member)  # pyright: ignore[reportArgumentType]
            elif member.is_module or member.is_class:
                self._visit(member)  # pyright: ignore[reportArgumentType]

    def _resolve(self, function: griffe.Function) -> None:
        module = function.module
        for parameter in function.parameters:
            default = parameter.default
            if not isinstance(default, griffe.ExprName):
                continue
            constant = module.members.get(str(default))
            if (
                constant is not None
                and not constant.is_alias
                and constant.is_attribute
                and constant.value is not None
            ):
                parameter.default = constant.value  # pyright: ignore[reportAttributeAccessIssue]
