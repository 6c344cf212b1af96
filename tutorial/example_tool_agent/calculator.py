"""The agent's tool: a calculator over + - * / and parentheses, evaluated on the expression's syntax tree (no
`eval`: the model's text is hostile input)."""

from __future__ import annotations

import ast
import operator
from typing import Callable, Union

Number = Union[int, float]
_OPS: dict[type, Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}
MAX_DIGITS = 30
"""Operands and results longer than this are refused (a model may write `9**9**9`-sized numbers in other forms)."""

TOOL_SPEC = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression (+, -, *, /, parentheses) and return its value.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "for example: 12 * 34"}},
            "required": ["expression"],
        },
    },
}


def _value(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _value(node.operand)
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        result = _OPS[type(node.op)](_value(node.left), _value(node.right))
        if len(str(abs(int(result)))) > MAX_DIGITS:
            raise ValueError("number too large")
        return result
    raise ValueError(f"unsupported: {type(node).__name__}")


def calculate(expression: str) -> str:
    """The tool's answer: `"<expression> = <value>"`, or `"error: ..."` for what it cannot evaluate."""
    text = expression.replace("×", "*").replace("x", "*").replace("÷", "/").strip()
    if not text or len(text) > 200:
        return "error: give an arithmetic expression such as 12 * 34"
    try:
        value = _value(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as exc:
        return f"error: {exc}"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    shown = round(value, 6) if isinstance(value, float) else value
    return f"{text} = {shown}"
