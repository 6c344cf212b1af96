"""The agent's tool: a calculator of one operation on two integers.

Its arguments are typed (an operation from a list, two integers), so a forced call (`tool_choice="required"`, a
grammar built from this schema) can only name an operation and write two numbers: which ones is the model's choice.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

OPERATIONS: dict[str, tuple[str, Callable[[int, int], int]]] = {
    "add": ("+", operator.add),
    "subtract": ("-", operator.sub),
    "multiply": ("*", operator.mul),
}
"""Each operation's sign (how questions and results write it) and function."""
MAX_ABS = 10**12
"""Operands beyond this are refused (a model may write a 40-digit number)."""

TOOL_SPEC = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Compute `a <operation> b` for two integers.",
        "parameters": {
            "type": "object",
            "properties": {
                "operation": {"type": "string", "enum": list(OPERATIONS)},
                "a": {"type": "integer"},
                "b": {"type": "integer"},
            },
            "required": ["operation", "a", "b"],
        },
    },
}


def calculate(args: Any) -> str:
    """The tool's answer to a call's parsed arguments: `"<a> <sign> <b> = <value>"`, or `"error: ..."`."""
    if not isinstance(args, dict):
        return "error: the arguments must be an object with operation, a and b"
    op, a, b = args.get("operation"), args.get("a"), args.get("b")
    if op not in OPERATIONS:
        return f"error: operation must be one of {', '.join(OPERATIONS)}"
    if not all(isinstance(x, int) and not isinstance(x, bool) and abs(x) <= MAX_ABS for x in (a, b)):
        return "error: a and b must be integers"
    sign, fn = OPERATIONS[op]
    return f"{a} {sign} {b} = {fn(a, b)}"
