"""The house's sizes: every module of the packages under 400 lines, every function under 50, so a newcomer reads
each in one sitting."""

from __future__ import annotations

import ast

import pytest

from scripts.source_tree import source_folders
from tests.support.procs import REPO

PACKAGES = tuple(
    f"{folder}/{pkg.name}"
    for folder in source_folders()
    for pkg in sorted((REPO / folder).iterdir())
    if (pkg / "__init__.py").is_file()
)
"""Every first-party package, on every floor."""
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 50


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_or_function_is_over_its_size(package):
    over = []
    for path in sorted((REPO / package).rglob("*.py")):
        source = path.read_text()
        lines = source.count("\n")
        if lines > MAX_MODULE_LINES:
            over.append(f"{path.relative_to(REPO)}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    over.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {length} lines")
    assert not over, "\n".join(over)
