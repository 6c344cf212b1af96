"""What a chat request constrains its answer to, as a `GrammarSpec` (pure: no grammar library needed).

`response_format` `json_object` (any JSON object) or `json_schema` (its schema), `tool_choice` `"required"` (one
call of one of its tools) or a named function (one call of that tool), in the Hermes format the engine parses:
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. Each backend (`xgrammar_backend`, `outlines_backend`)
compiles the same spec to its own grammar.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from ajet.errors import InvalidRequest

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
"""The Hermes tags a forced call is wrapped in (spelled as text: special tokens are never in a grammar)."""


@dataclass(frozen=True)
class GrammarSpec:
    """What a request constrains its answer to (hashable: one compile per distinct spec and tokenizer)."""

    kind: str
    """`json_object`, `json_schema` (its answer is JSON of `schema`) or `tool_call` (one Hermes tool call whose
    JSON is of `schema`)."""
    schema: str = ""
    """The JSON schema, as JSON text in the client's key order ("" for `json_object`)."""

    @property
    def field(self) -> str:
        """The request field that asked for it (what a refusal names)."""
        return "tool_choice" if self.kind == "tool_call" else "response_format"

    @property
    def json_schema(self) -> str:
        """The schema the answer's JSON follows (`json_object`: any JSON object, OpenAI's rule)."""
        return self.schema or '{"type": "object"}'


def grammar_spec(body: dict[str, Any]) -> Optional[GrammarSpec]:
    """The grammar a chat request's `tool_choice` / `response_format` asks for (None: unconstrained);
    `InvalidRequest` naming the field when it cannot be honoured (a named tool it does not send)."""
    choice, tools = body.get("tool_choice"), body.get("tools") or []
    if choice == "required" or isinstance(choice, dict):
        return GrammarSpec("tool_call", _canonical(_call_schema(_chosen_tools(choice, tools))))
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_object":
        return GrammarSpec("json_object")
    if fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise InvalidRequest.for_field("response_format.json_schema.schema", "required, a JSON schema object")
        return GrammarSpec("json_schema", _canonical(schema))
    return None


def _chosen_tools(choice: Any, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    functions = [t.get("function") or {} for t in tools if t.get("type", "function") == "function"]
    if choice == "required":
        return functions
    name = (choice.get("function") or {}).get("name")
    chosen = [f for f in functions if f.get("name") == name]
    if not chosen:
        raise InvalidRequest.for_field(
            "tool_choice", f"names function {name!r}, which is not among the request's tools"
        )
    return chosen


def _call_schema(functions: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON of one Hermes call of one of `functions`: `{"name": <its name>, "arguments": <its parameters>}`."""
    options = [
        {
            "type": "object",
            "properties": {
                "name": {"const": f.get("name", "")},
                "arguments": f.get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for f in functions
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def _canonical(schema: dict[str, Any]) -> str:
    """The schema as JSON text, its keys in the client's order: a schema's property order is the order
    the answer writes them in (`name` before `arguments` in a call)."""
    return json.dumps(schema, separators=(",", ":"))
