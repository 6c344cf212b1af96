"""Constrained decoding on the embedded engine: forced tool calls and structured output, through xgrammar.

What a request asks for becomes a grammar (`grammar_spec`, pure): `response_format` `json_object` (any JSON
object) or `json_schema` (its schema), `tool_choice` `"required"` (one call of one of its tools) or a named
function (one call of that tool), in the Hermes format the engine parses: `<tool_call>{"name": ..., "arguments":
{...}}</tool_call>`. `Grammars` compiles it once per tokenizer (xgrammar caches compiled grammars) and hands each
request a `TokenConstraint`: at each step it masks the tokens the grammar cannot take next and is told the one
sampled; at the grammar's end only an end-of-turn token is allowed.

Why xgrammar: vLLM uses it (one grammar semantics for both engines), it reads Hugging Face tokenizers of every
kind (byte-level BPE, sentencepiece, the built-in character-level one), and its mask costs microseconds a token
(`bench/constrained_decoding.py`: it against outlines-core, and against unconstrained sampling). It is installed
without triton, which only its CUDA kernel uses: the mask is applied here in torch, on any device.

The logged log-probability of a constrained token is that of the distribution it was sampled from: the model's
(temperature-free) renormalised over the allowed tokens, as vLLM logs it (it applies the grammar's mask before
its sampler). The trainer's is the unmasked model's, so the engine-trainer gap of such a token is
log(allowed mass) <= 0; with `tis_cap` the truncated importance weight min(pi_trainer / pi_engine, cap) = allowed
mass corrects for it (on an untrained model that weight is ~1/vocabulary: docs/frameworks.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

import torch

from ajet.errors import InvalidRequest

GRAMMAR_EXTRA = "xgrammar==0.2.8"
"""What `pip install` needs for constrained decoding (`make setup` installs it without triton)."""


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


class TokenConstraint:
    """One request's grammar state: `mask_` before a token is sampled, `accept` after."""

    def __init__(self, matcher: Any, vocab: int):
        import xgrammar as xgr

        self.matcher = matcher
        self.bitmask = xgr.allocate_token_bitmask(1, vocab)
        self._bits = torch.arange(32, dtype=torch.int32)

    def mask_(self, logits: torch.Tensor) -> None:
        """Set the logit of every token the grammar cannot take next to -inf, in place (one row, any device)."""
        self.matcher.fill_next_token_bitmask(self.bitmask)
        allowed = ((self.bitmask[0, :, None] >> self._bits) & 1).flatten()[: logits.shape[-1]].bool()
        logits.masked_fill_(~allowed.to(logits.device), float("-inf"))

    def accept(self, token: int) -> None:
        """Advance past the sampled token (RuntimeError if the grammar refuses it: sampling ignored the mask)."""
        if not self.matcher.accept_token(token):
            raise RuntimeError(f"the grammar refused token {token}, which was sampled under its mask")


class Grammars:
    """Compiles request grammars for one tokenizer and model (xgrammar, its compiled grammars cached)."""

    def __init__(self, tokenizer: Any, vocab: int, stop_ids: set[int]):
        try:
            import xgrammar as xgr
        except ImportError as exc:  # the engine then refuses constrained requests, naming what to install
            raise ImportError(f"constrained decoding needs xgrammar: pip install {GRAMMAR_EXTRA}") from exc
        self.vocab = vocab
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab, stop_token_ids=sorted(stop_ids))
        self.compiler = xgr.GrammarCompiler(info, max_threads=1)

    def constraint(self, spec: GrammarSpec) -> TokenConstraint:
        """A fresh `TokenConstraint` for a request of `spec`; `InvalidRequest` naming the field when xgrammar
        cannot compile its schema."""
        import xgrammar as xgr

        try:
            compiled = self._compile(spec)
        except (RuntimeError, ValueError) as exc:
            raise InvalidRequest.for_field(spec.field, f"its schema cannot be compiled to a grammar: {exc}") from exc
        return TokenConstraint(xgr.GrammarMatcher(compiled), self.vocab)

    def _compile(self, spec: GrammarSpec) -> Any:
        import xgrammar as xgr

        # JSON laid out as json.dumps lays it out (`, ` and `: `, no other whitespace): an untrained policy would
        # otherwise pad its answer with blanks;
        # `json_object` is any JSON object (OpenAI's rule; xgrammar's built-in JSON grammar takes any value)
        body = xgr.Grammar.from_json_schema(spec.schema or '{"type": "object"}', any_whitespace=False)
        if spec.kind in ("json_object", "json_schema"):
            return self.compiler.compile_grammar(body)
        call = xgr.Grammar.concat(
            xgr.Grammar.from_ebnf('root ::= "<tool_call>"'), body, xgr.Grammar.from_ebnf('root ::= "</tool_call>"')
        )
        return self.compiler.compile_grammar(call)
