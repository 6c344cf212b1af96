"""Constrained decoding on the embedded engine, through each backend (xgrammar, outlines-core): forced tool calls
(`tool_choice` "required" and a named function) and structured output (`response_format` json_object /
json_schema), on the untrained built-in models, char-level and BPE: what the policy samples under the grammar is
what the client gets and what is logged. The logged log-probability is that of the masked distribution; the
trainer's (unmasked) is lower by log(allowed mass), and truncated importance sampling weighs each such token by
exactly that mass."""

import json

import httpx
import pytest
import torch

from ajet import AgentJetJob
from ajet.errors import InvalidRequest
from ajet_trainer.embedded.grammar import BACKENDS, GrammarSpec, grammar_spec
from ajet_trainer.embedded.server import EmbeddedEngine
from ajet_trainer.grpo import collate, sequence_logprobs, tis_weights
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path
from ajet_trainer.types import TrainSequence

TOOLS = [
    {"type": "function", "function": {"name": "flag", "parameters": {
        "type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"]}}},
    {"type": "function", "function": {"name": "pick", "parameters": {
        "type": "object", "properties": {"c": {"enum": ["red", "blue"]}}, "required": ["c"]}}},
]  # fmt: skip
VERDICT = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def test_grammar_spec_reads_tool_choice_and_response_format():
    assert grammar_spec({"messages": []}) is None
    assert grammar_spec({"tools": TOOLS, "tool_choice": "auto"}) is None
    required = grammar_spec({"tools": TOOLS, "tool_choice": "required"})
    assert required.kind == "tool_call" and [o["properties"]["name"] for o in json.loads(required.schema)["anyOf"]] == [
        {"const": "flag"}, {"const": "pick"}]  # fmt: skip
    named = grammar_spec({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "pick"}}})
    assert json.loads(named.schema)["properties"]["arguments"] == TOOLS[1]["function"]["parameters"]
    assert grammar_spec({"response_format": {"type": "json_object"}}) == GrammarSpec("json_object")
    fmt = {"type": "json_schema", "json_schema": {"name": "v", "schema": VERDICT}}
    assert json.loads(grammar_spec({"response_format": fmt}).schema) == VERDICT
    with pytest.raises(InvalidRequest) as err:
        grammar_spec({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}})
    assert err.value.param == "tool_choice"


MODELS_AND_BACKENDS = [(m, b) for m in ("builtin:tiny", "builtin:tiny-bpe") for b in BACKENDS]


@pytest.fixture(scope="module", params=MODELS_AND_BACKENDS, ids=[f"{m[8:]}-{b}" for m, b in MODELS_AND_BACKENDS])
def engine(request):
    name, backend = request.param
    model, tok = load_policy(str(builtin_model_path(name)), AgentJetJob(), "cpu")
    eng = EmbeddedEngine(model, tok, max_tokens_cap=200)
    eng.grammar_backends = (backend,)
    url = eng.start()
    yield url, model, tok
    eng.stop()


def _ask(url, seed, **extra):
    body = {"messages": [{"role": "user", "content": "hi"}], "temperature": 1.0, "seed": seed, "logprobs": True,
            "return_token_ids": True, **extra}  # fmt: skip
    r = httpx.post(url + "/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("seed", range(3))
def test_tool_choice_required_and_named_always_make_a_call_of_that_tool(engine, seed):
    url, _, _ = engine
    anyone = _ask(url, seed, tools=TOOLS, tool_choice="required")["choices"][0]
    (call,) = anyone["message"]["tool_calls"]
    assert anyone["finish_reason"] == "tool_calls" and call["function"]["name"] in ("flag", "pick")
    named = _ask(url, seed, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "pick"}})
    (call,) = named["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "pick" and json.loads(call["function"]["arguments"])["c"] in ("red", "blue")


@pytest.mark.parametrize("seed", range(3))
def test_response_format_json_schema_and_json_object(engine, seed):
    url, _, _ = engine
    fmt = {"type": "json_schema", "json_schema": {"name": "v", "schema": VERDICT}}
    verdict = _ask(url, seed, response_format=fmt)["choices"][0]
    assert verdict["finish_reason"] == "stop"
    assert json.loads(verdict["message"]["content"]) in ({"ok": True}, {"ok": False})
    anything = _ask(url, seed, response_format={"type": "json_object"}, max_tokens=40)["choices"][0]
    assert anything["message"]["content"].lstrip().startswith("{")  # an untrained policy may not close it in 40


def test_a_named_tool_the_request_lacks_is_a_400_naming_tool_choice(engine):
    url, _, _ = engine
    r = httpx.post(url + "/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS,
                   "tool_choice": {"type": "function", "function": {"name": "nope"}}}, timeout=60)  # fmt: skip
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"


def test_logged_logprobs_are_the_masked_distributions_and_tis_weighs_by_the_allowed_mass(engine):
    """Engine-trainer gap under a grammar: the engine logs log p(t | allowed) >= the trainer's log p(t), the gap
    being log(allowed mass); unconstrained, the two agree. TIS (cap 2) then weighs each token by its allowed mass."""
    url, model, tok = engine
    gaps = {}
    for name, extra in (("free", {}), ("forced", {"tools": TOOLS, "tool_choice": "required"})):
        ans = _ask(url, 7, **extra)
        ch = ans["choices"][0]
        engine_lp = torch.tensor([[c["logprob"] for c in ch["logprobs"]["content"]]])
        seq = TrainSequence("e", "t", tuple(ans["prompt_token_ids"]), tuple(ch["token_ids"]),
                            (1,) * len(ch["token_ids"]), tuple(engine_lp[0].tolist()))  # fmt: skip
        batch = collate([(seq, 1.0)], tok.pad_token_id)
        with torch.no_grad():
            trainer_lp, _ = sequence_logprobs(model, batch)
        gaps[name] = (trainer_lp - engine_lp, trainer_lp, engine_lp, batch.response_mask)
    free = gaps["free"][0]
    assert float(free.abs().max()) < 1e-3  # same weights, same numbers
    gap, trainer_lp, engine_lp, mask = gaps["forced"]
    assert float(gap.max()) < 1e-3 and float(gap.min()) < -0.01  # masked: the engine's is higher where it cut mass
    weights, m = tis_weights(trainer_lp, engine_lp, mask, cap=2.0)
    assert torch.allclose(weights, gap.exp().clamp(max=2.0), atol=1e-4) and m["tis_weight_mean"] < 1.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_forced_call_writes_its_name_first_and_follows_the_script_it_may(backend):
    """The call's JSON follows the schema's property order (the Hermes format: `name`, then `arguments`); a
    scripted policy that says a valid call is not bent by the mask."""
    from tests.support.scripted_model import ScriptedModel

    model, tok = load_policy(str(builtin_model_path("builtin:tiny")), AgentJetJob(), "cpu")
    wrapped = ScriptedModel(model, [])
    eng = EmbeddedEngine(wrapped, tok, max_tokens_cap=200)
    eng.grammar_backends = (backend,)
    url = eng.start()
    try:
        call = json.dumps({"name": "pick", "arguments": {"c": "blue"}})  # the grammar's layout: `, ` and `: `
        pieces = ["<", "tool_call>", call, "</", "tool_call>"]  # the tags as characters: the grammar spells them
        wrapped.reset([i for p in pieces for i in tok.encode(p, add_special_tokens=False)] + [tok.eos_token_id])
        r = _ask(url, 1, tools=TOOLS, tool_choice="required")["choices"][0]
        assert tok.decode(r["token_ids"], skip_special_tokens=True) == "<tool_call>" + call + "</tool_call>"
        (made,) = r["message"]["tool_calls"]
        assert (made["function"]["name"], json.loads(made["function"]["arguments"])) == ("pick", {"c": "blue"})
    finally:
        eng.stop()


@pytest.mark.parametrize("choice,backends", [("auto", tuple(BACKENDS)), ("outlines-core", ("outlines-core",))])
def test_the_trainer_option_picks_the_engines_grammar_backend(tiny, choice, backends):
    """`grammar_backend` (trainer.yaml, --grammar-backend): auto tries xgrammar first; a named one is the only one."""
    from ajet_trainer.embedded.engines import job_engine
    from ajet_trainer.options import TrainerOptions

    model, tok = tiny
    engine = job_engine(model, tok, AgentJetJob(), TrainerOptions.from_config(grammar_backend=choice))
    assert engine.grammar_backends == backends
    compiler = engine._grammars(grammar_spec({"response_format": {"type": "json_object"}}))
    assert type(compiler) is BACKENDS[backends[0]]
