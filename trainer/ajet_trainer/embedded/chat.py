"""Chat requests in, OpenAI/vLLM-format answers out (pure functions, no model).

- `prompt_ids`: messages (+ tools) through the tokenizer's chat template (`ajet_trainer.chat_render`), or the
  token prompt the proxy forwards (`kv_transfer_params.prompt_token_ids`, as vLLM takes it).
- `completion_body` / `chunk_body`: answers with `prompt_token_ids`, per-choice `token_ids` and
  `logprobs.content[j].logprob`, exactly where vLLM puts them.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Optional

import orjson

from ajet.errors import ContextLengthExceeded, InvalidRequest
from ajet_core.chat_request import ChatCompletionRequest, content_text, prompt_over_job, template_tools
from ajet_core.engine_answer import AnswerChoice, AnswerMessage, EngineAnswer, Usage
from ajet_trainer.chat_render import parse_tool_calls, render_ids, template_options
from ajet_trainer.embedded.types import GenRequest, GenResult
from ajet_trainer.types import Tokenizer
from ajet_trainer.vision import ImageInputs, Vision
from ajet_trainer.vision_folder import IMAGE_TEXT


def forwarded_prompt(body: dict[str, Any], vocab_size: int) -> Optional[list[int]]:
    """The prompt ids a request forwards instead of its messages being rendered (vLLM's decode-side reuse,
    `kv_transfer_params.prompt_token_ids`; the proxy sends an episode's token history this way), or None.
    `InvalidRequest` naming the field when they are not a non-empty list of ids of this vocabulary."""
    kv = body.get("kv_transfer_params")
    if not isinstance(kv, dict) or kv.get("prompt_token_ids") is None:
        return None
    ids = kv["prompt_token_ids"]
    if not isinstance(ids, list) or not ids or any(type(i) is not int or not 0 <= i < vocab_size for i in ids):
        raise InvalidRequest.for_field(
            "kv_transfer_params.prompt_token_ids", f"must be a non-empty list of token ids in [0, {vocab_size})"
        )
    return ids


KEPT_ROLES = ("system", "user", "tool")
"""Roles whose text every chat template renders whole (an assistant turn's may be cut, e.g. earlier `<think>`)."""


def longest_token_chars(tokenizer: Any) -> int:
    """The most characters one token can stand for: its vocabulary's longest piece (a byte-level piece spells each
    byte with one character, a sentencepiece piece its text and a marker), so a text of N characters is at least
    N / this many tokens."""
    return max((len(piece) for piece in tokenizer.get_vocab()), default=1) or 1


def tokens_at_least(messages: list[dict[str, Any]], token_chars: int) -> int:
    """A lower bound on the prompt's tokens, counted without the template or the tokenizer (cheap for a body of
    any size): the text of the turns every template keeps, over the longest token's characters."""
    chars = sum(len(content_text(m.get("content"))) for m in messages if m.get("role") in KEPT_ROLES)
    return chars // token_chars


def prompt_ids(
    tokenizer: Any,
    body: dict[str, Any],
    max_context: Optional[int] = None,
    token_chars: int = 0,
    max_prompt: Optional[int] = None,
    vision: Optional[Vision] = None,
    images: Optional[ImageInputs] = None,
) -> list[int]:
    """Token ids of the request's prompt: the forwarded token prompt when it has one, else the rendered chat
    prompt (generation prompt added), of a body that passed `ajet_core.chat_request.validate_chat`. With a VL model's
    `vision`, each of the messages' `images` is one run of placeholders: expanded when rendered, checked when
    forwarded (`InvalidRequest` naming the field when they do not line up).
    `InvalidRequest` when the chat template refuses the messages; `ContextLengthExceeded` when the prompt leaves no
    room in the model's context or is over `max_prompt` tokens (the job's `max_prompt_length`). With
    `token_chars` (`longest_token_chars`) a prompt that cannot fit is refused before it is rendered: a huge body
    costs no templating or tokenizing."""
    ids = forwarded_prompt(body, len(tokenizer))
    if ids is None:
        least = tokens_at_least(body["messages"], token_chars) if token_chars and max_context else 0
        if max_context is not None and least >= max_context:
            why = f"the prompt is at least {least} tokens; this model's context is {max_context} tokens"
            raise ContextLengthExceeded.for_field("messages", why)
        ids = rendered_ids(tokenizer, body["messages"], template_tools(body), template_options(body), vision, images)
    elif vision is not None:
        vision.check_runs(ids, images, "kv_transfer_params.prompt_token_ids")
    if max_context is not None and len(ids) >= max_context:
        why = f"the prompt is {len(ids)} tokens; this model's context is {max_context} tokens"
        raise ContextLengthExceeded.for_field("messages", why)
    if max_prompt is not None and len(ids) > max_prompt:
        raise ContextLengthExceeded(prompt_over_job(len(ids), max_prompt), fields=["messages"])
    return ids


def rendered_ids(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: Optional[list[Any]],
    options: dict[str, Any],
    vision: Optional[Vision],
    images: Optional[ImageInputs],
    generation: bool = True,
) -> list[int]:
    """`messages` through the chat template (`render_ids`); with a VL model's `vision`, each image part rendered as its
    placeholder and expanded to the run of its image in `images` (what a chat prompt and `/tokenize` both are)."""
    ids = render_ids(tokenizer, messages, tools, generation, options, IMAGE_TEXT if vision is not None else "")
    return vision.expand(ids, images) if vision is not None else ids


GREEDY_BELOW = 1e-5
"""A temperature below this samples greedily (as vLLM does): dividing logits by 1e-45 overflows."""


def uses_tools(body: dict[str, Any]) -> bool:
    """Whether the model sees the tools and its answer is parsed for calls (`ajet_core.chat_request.template_tools`)."""
    return template_tools(body) is not None


RESPONSE_FORMATS = ("text", "json_object", "json_schema")
"""`response_format` types the engines honour (the last two through constrained decoding)."""


def check_engine_support(body: dict[str, Any]) -> None:
    """Refuse, naming the field, what the embedded engine accepts in the API but cannot honour: `top_k` (the vLLM
    engine passes it to vLLM's sampler) and a `response_format` type it does not know. Forced tool calls and
    structured output are constrained decoding (`ajet_trainer.embedded.grammar`)."""
    if body.get("top_k") not in (None, 0, -1):
        raise InvalidRequest.for_field(
            "top_k", "the embedded engine samples with temperature and top_p only (the vLLM engine supports top_k)"
        )
    fmt = body.get("response_format")
    if fmt is not None and fmt.get("type") not in RESPONSE_FORMATS:
        raise InvalidRequest.for_field("response_format.type", f"must be one of {', '.join(RESPONSE_FORMATS)}")


def gen_request(
    request: ChatCompletionRequest,
    prompt: list[int],
    default_temperature: float,
    max_tokens_cap: int,
    max_context: Optional[int] = None,
) -> GenRequest:
    """Sampling settings of a validated chat request (vLLM's `to_sampling_params`; the engine's types live here).

    The answer may be as long as the client's `max_tokens`, the job's per-turn cap and the room the model's context
    leaves, whichever is least: a larger `max_tokens` is cut to the server's limits, as vLLM cuts it (an agent
    framework's default, e.g. Claude Code's 32,000, would otherwise be refused). An answer cut by them ends with
    finish reason `length`; the proxy tells it from a limit the client set by its length."""
    asked = request.tokens_asked()
    room = max_tokens_cap if max_context is None else min(max_tokens_cap, max_context - len(prompt))
    stop = request.stop or []
    temperature = default_temperature if request.temperature is None else request.temperature
    return GenRequest(
        prompt_ids=prompt,
        max_tokens=room if asked is None else min(asked, room),
        temperature=0.0 if temperature < GREEDY_BELOW else temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        seed=request.seed,
        stop=[stop] if isinstance(stop, str) else list(stop),
        top_logprobs=request.top_logprobs or 0,
        min_tokens=request.min_tokens or 0,
    )


def logprob_item(tokenizer: Any, token_id: int, logprob: float, top: list[tuple[int, float]]) -> dict[str, Any]:
    """One token's entry of `logprobs.content`, with its most likely alternatives."""
    return {
        "token": tokenizer.decode([token_id]),
        "logprob": logprob,
        "bytes": None,
        "top_logprobs": [{"token": tokenizer.decode([t]), "logprob": lp, "bytes": None} for t, lp in top],
    }


def _logprobs(tokenizer: Any, res: GenResult) -> dict[str, Any]:
    tops = res.top_logprobs or [[] for _ in res.token_ids]
    return {"content": [logprob_item(tokenizer, t, lp, top) for t, lp, top in zip(res.token_ids, res.logprobs, tops)]}


def completion_body(
    tokenizer: Tokenizer,
    model: str,
    prompt: list[int],
    res: GenResult,
    tools: bool,
    want_ids: bool,
    want_logprobs: bool,
    image_grids: Optional[list[list[int]]] = None,
) -> EngineAnswer:
    """A non-streamed chat completion in vLLM's format (sent as `answer_json`: fields not asked for left out), with
    each prompt image's grid beside the prompt's ids (`image_grids`) where it has images."""
    content, calls = parse_tool_calls(res.text) if tools else (res.text, [])
    message = AnswerMessage(
        role="assistant", content=content or (None if calls else ""), **({"tool_calls": calls} if calls else {})
    )
    choice = AnswerChoice(
        index=0,
        message=message,
        finish_reason="tool_calls" if calls else res.finish_reason,
        stop_reason=res.stop_reason,
        **({"logprobs": _logprobs(tokenizer, res)} if want_logprobs else {}),
        **({"token_ids": res.token_ids} if want_ids else {}),
    )
    extra: dict[str, Any] = {"prompt_token_ids": prompt} if want_ids else {}
    if want_ids and image_grids:
        extra["image_grids"] = image_grids
    if len(res.version_spans) > 1:  # an update came mid-answer: which tokens each version sampled
        extra["policy_version_spans"] = res.version_spans
    return EngineAnswer(
        id=f"chatcmpl-{uuid.uuid4().hex}",
        object="chat.completion",
        created=int(time.time()),
        model=model,
        choices=[choice],
        usage=Usage.of(len(prompt), len(res.token_ids)),
        policy_version=res.policy_version,
        **extra,
    )


def answer_json(answer: EngineAnswer) -> bytes:
    """An answer's body: the fields it was built with, defaults included where the builder named them (a field
    not asked for is absent, not null)."""
    return orjson.dumps(answer.model_dump(exclude_unset=True))


def chunk_body(
    cid: str,
    model: str,
    delta: dict[str, Any],
    token: Optional[tuple[int, dict[str, Any]]] = None,
    finish: Optional[str] = None,
    prompt: Optional[list[int]] = None,
    want_ids: bool = False,
    want_logprobs: bool = False,
    stop_reason: Optional[str] = None,
) -> dict[str, Any]:
    """One streamed chunk; the first carries `prompt_token_ids`, each token chunk its `token_ids` and
    (`token` = (id, its `logprob_item`)) its logprobs, the last its finish and stop reasons."""
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    if finish is not None:
        choice["stop_reason"] = stop_reason
    if token is not None:
        tok, item = token
        if want_ids:
            choice["token_ids"] = [tok]
        if want_logprobs:
            choice["logprobs"] = {"content": [item]}
    body: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
    }
    if prompt is not None and want_ids:
        body["prompt_token_ids"] = prompt
    return body
