"""Bytes per chat answer the agent receives, side by side in one run: with the token ids and policy version the
proxy asks the engine for (what every answer carried before) against the answer trimmed to what the client asked
for (`ajet_proxy.dataplane.chat.shape.ChatShape`). The answers are the embedded engine's own bodies
(`completion_body`) for prompts of the built-in BPE model's tokenizer; one JSON line per prompt size, then the
ratio.

Usage: python -m bench.answer_bytes [--prompt-tokens 519 8192 32768] [--model builtin:tiny-bpe]
"""

from __future__ import annotations

import argparse
import json

from ajet_core.runtime import apply_offline_env
from bench.results import emit

apply_offline_env()

from ajet_proxy.dataplane.chat.shape import ChatShape
from ajet_trainer.embedded.chat import completion_body
from ajet_trainer.embedded.types import GenResult
from ajet_trainer.tiny_model import resolve_model_path

ANSWER = "The answer is 42: add the two numbers, then check the sum against the tool's result."


def answer_sizes(tok, prompt_tokens: int) -> tuple[int, int]:
    """(bytes with ids, bytes as the agent now gets them) of one answer to a prompt of `prompt_tokens` tokens."""
    text = 'Read the file, run the tests, then fix what fails. 12 + 30 = 42; {"path": "src/a.py"}. '
    prompt = tok.encode(text * (prompt_tokens // 10 + 1), add_special_tokens=False)[:prompt_tokens]
    ids = tok.encode(ANSWER, add_special_tokens=False)
    res = GenResult(ids, [-0.5] * len(ids), "stop", ANSWER, policy_version=3)
    body = completion_body(tok, "policy", prompt, res, tools=False, want_ids=True, want_logprobs=True).model_dump(
        exclude_unset=True
    )
    before = ChatShape(want_logprobs=False, want_ids=True).answer(200, json.dumps(body).encode(), dict(body))
    after = ChatShape(want_logprobs=False, want_ids=False).answer(200, json.dumps(body).encode(), dict(body))
    return len(before.body), len(after.body)


def main() -> None:
    from transformers import AutoTokenizer

    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt-tokens", type=int, nargs="+", default=[519, 8192, 32768])
    ap.add_argument("--model", default="builtin:tiny-bpe")
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(str(resolve_model_path(args.model)))
    for n in args.prompt_tokens:
        before, after = answer_sizes(tok, n)
        for side, size in (("with_ids", before), ("as_asked", after)):
            emit("answer_bytes", {"figure": "answer_bytes", "side": side, "prompt_tokens": n, "bytes": size})
        ratio = round(before / after, 1)
        emit("answer_bytes", {"figure": "answer_bytes_ratio", "prompt_tokens": n, "with_ids_over_as_asked": ratio})


if __name__ == "__main__":
    main()
