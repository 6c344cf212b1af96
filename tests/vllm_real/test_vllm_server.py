"""vLLM itself (the CPU build), driven as `--engine vllm` drives it: one server shared by the module.

The server serves what `ajet-trainer export-model` wrote from a trainer's checkpoint. Calls go through the
proxy into the store as in training, and are checked against the trainer's own model: the prompt ids
equal the chat template's, the completion log-probs equal the trainer's forward pass (vLLM runs float32
on CPU). LoRA adapters hot-load and unload, full weights reload in place, and
vLLM's Hermes parser turns the tiny model's `<tool_call>` output into OpenAI tool calls.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from ajet import SwarmClient
from ajet_trainer.checkpoint import save_checkpoint
from ajet_trainer.errors import EngineStartError
from ajet_trainer.model_export import export_model
from ajet_trainer.vllm.adapters import ServedAdapters
from ajet_trainer.vllm.launch import prometheus_counter
from ajet_trainer.vllm.server import VllmServer
from tests.support.logprobs import completion_logprobs
from tests.support.real_vllm import adapter_model, random_adapter, start_vllm, tiny_path
from tests.support.rolling import make_rolling

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow, pytest.mark.timeout(900)]  # the server starts in minutes

MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say a"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "the weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
TOOL_CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
EXACT = 2e-4  # float32 on both sides; the attention kernels differ
CAP = 100
"""The job's per-turn cap, set as vLLM's server-wide output limit (the hermes call above fits in it)."""


@pytest.fixture(scope="module")
def trained(module_tmp: Path) -> tuple[torch.nn.Module, Path]:
    """A trainer's model after some steps (the built-in one, moved), and its checkpoint exported as a folder."""
    model = AutoModelForCausalLM.from_pretrained(tiny_path())
    torch.manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    exp = module_tmp / "exp"
    save_checkpoint(
        exp,
        3,
        model,
        AutoTokenizer.from_pretrained(tiny_path()),
        torch.optim.AdamW(model.parameters()),
        False,
        {"policy_version": 3, "model": "builtin:tiny"},
    )
    return model.eval(), export_model(exp, module_tmp / "exported")


@pytest.fixture(scope="module")
def vllm(module_tmp: Path, trained) -> Iterator[VllmServer]:
    # `vllm serve OUT` of an export; a context smolagents' CodeAgent prompt fits, the per-turn cap a job sets
    engine = start_vllm(module_tmp, model_path=str(trained[1]), max_model_len=16_384, max_tokens_cap=CAP)
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def client(proxy, store, vllm) -> Iterator[SwarmClient]:
    from ajet import AgentJetJob

    c = SwarmClient(proxy.url)
    limits = {"max_prompt_length": 12_000, "max_response_length": 4_000, "max_model_len": 16_384}
    c.sync_train_config(AgentJetJob(batch_size=2, num_repeat=2, max_response_length_in_one_turn=CAP, **limits))
    c.start_engine()
    make_rolling(store, vllm.base, model="policy", name="vllm-0")
    yield c
    c.close()


@pytest.fixture(scope="module")
def hf(trained) -> tuple[torch.nn.Module, object]:
    """The trainer's model itself and the export's tokenizer: the references vLLM's answers are checked against."""
    return trained[0], AutoTokenizer.from_pretrained(trained[1])


def logged_call(store, uuid: str, n: int = 1):
    deadline = time.monotonic() + 10
    while len(calls := store.calls(uuid)) < n:
        assert time.monotonic() < deadline, "the call never reached the store"
        time.sleep(0.05)
    return calls[n - 1]


def chat(vllm: VllmServer, model: str = "policy") -> httpx.Response:
    body = {"model": model, "messages": MSGS, "max_tokens": 6, "logprobs": True, "return_token_ids": True, "seed": 1}
    return httpx.post(vllm.base_url + "/chat/completions", json=body, timeout=60)


def gaps(
    logprobs: list[float], model: torch.nn.Module, prompt_ids: list[int], completion_ids: list[int]
) -> list[float]:
    """|engine - `model`| log-prob of each completion token."""
    return [abs(a - b) for a, b in zip(logprobs, completion_logprobs(model, prompt_ids, completion_ids))]


def answer_gaps(answer: dict, model: torch.nn.Module) -> list[float]:
    """`gaps` of an answer vLLM gave directly (`chat(...).json()`)."""
    choice = answer["choices"][0]
    return gaps(
        [c["logprob"] for c in choice["logprobs"]["content"]], model, answer["prompt_token_ids"], choice["token_ids"]
    )


def test_health_models_and_cpu_settings(vllm):
    assert httpx.get(vllm.base + "/health").status_code == 200
    assert [m["id"] for m in httpx.get(vllm.base_url + "/models").json()["data"]] == ["policy", "judge"]
    log = vllm.log_tail(10**7)
    assert "'dtype': 'float32'" in log and "'enforce_eager': True" in log  # the CPU defaults reached vLLM


def test_a_bad_flag_reports_vllms_own_words(tmp_path):
    with pytest.raises(EngineStartError, match="no-such-flag"):
        start_vllm(tmp_path, user_args=("--no-such-flag",), timeout_s=240)


@pytest.mark.parametrize("stream", [False, True])
def test_calls_log_vllms_ids_and_logprobs_which_the_trainer_reproduces(client, store, hf, stream):
    model, tok = hf
    uuid, creds = client.begin_episode()
    out = creds.as_openai_client().chat.completions.create(
        model="x", messages=MSGS, max_tokens=8, seed=4, stream=stream
    )
    text = (
        "".join(c.choices[0].delta.content or "" for c in out if c.choices)
        if stream
        else out.choices[0].message.content
    )
    call = logged_call(store, uuid)
    assert call.engine == "vllm-0" and call.stream == stream
    assert call.prompt_ids == tok.apply_chat_template(MSGS, add_generation_prompt=True, return_dict=True)["input_ids"]
    assert call.completion_ids and len(call.logprobs) == len(call.completion_ids)
    assert tok.decode(call.completion_ids, skip_special_tokens=True) == text
    gap = gaps(call.logprobs, model, call.prompt_ids, call.completion_ids)
    assert max(gap) < EXACT, gap


def test_hermes_tool_calls_are_parsed_by_vllm_and_logged(client, store):
    """A forced call of a tool whose schema allows one value makes the untrained model write `TOOL_CALL`; vLLM's hermes
    parser reads it. (Structured outputs beside tools no longer force it: under `--tool-strict-level parameter` vLLM
    lets the model choose between them and a call, docs/scaling.md.)"""
    uuid, creds = client.begin_episode()
    only_paris = {"type": "object", "properties": {"city": {"enum": ["Paris"]}}, "required": ["city"]}
    tools = [{"type": "function", "function": {**TOOLS[0]["function"], "parameters": only_paris}}]
    out = creds.as_openai_client().chat.completions.create(
        model="x",
        messages=[{"role": "user", "content": "weather in Paris?"}],
        tools=tools,
        tool_choice="required",
        max_tokens=80,
    )
    msg = out.choices[0].message
    assert out.choices[0].finish_reason == "tool_calls" and msg.content in (None, "")
    assert [(t.function.name, json.loads(t.function.arguments)) for t in msg.tool_calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    call = logged_call(store, uuid)
    assert call.finish_reason == "tool_calls" and call.completion_ids[-1] == 2  # <|im_end|>


PICK = [
    {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {"c": {"enum": ["red", "blue"]}}, "required": ["c"]}}}
    for name in ("pick", "skip")
]  # fmt: skip


def called(message) -> list[str]:
    """The tools an answer calls: parsed by vLLM, else (a call its parser could not read) named in its text."""
    parsed = [t.function.name for t in message.tool_calls or ()]
    return parsed or re.findall(r'<tool_call>\s*\{"name": "(\w+)"', message.content or "")


def follows_pick_schema(message) -> bool:
    """Whether an answer's call(s) follow `PICK`'s schema: parsed calls with `{"c": "red" | "blue"}`, or (an answer
    cut by its token limit) text that, blanks removed, is the start of such a call."""
    if message.tool_calls:
        return all(json.loads(t.function.arguments) in ({"c": "red"}, {"c": "blue"}) for t in message.tool_calls)
    text = re.sub(r"\s+", "", message.content or "")
    calls = [f'<tool_call>{{"name":"{n}","arguments":{{"c":"{c}"}}}}</tool_call>' for n in ("pick", "skip")
             for c in ("red", "blue")]  # fmt: skip
    return len(text) > len('<tool_call>{"name":"pick","arguments":') and any(c.startswith(text) for c in calls)


def test_forced_calls_structured_output_and_top_k_through_the_proxy(client, store, hf):
    """What the proxy passes through to vLLM untouched: `tool_choice` "required" and named, `response_format`
    json_schema, `top_k`. Each call is logged with ids, and a token sampled under a grammar is logged with the
    masked distribution's log-probability (vLLM applies the grammar before its sampler), as the embedded engine
    logs it: at or above the trainer's own, strictly above where the mask took mass away.

    A forced call's arguments follow its tool's schema, as on the embedded engine
    (tests/trainer/embedded/test_grammar.py): vLLM 0.32's default forces only the call and its tool's name (the
    untrained model wrote `"arguments": 3` and `{}` for a tool whose schema wants `{"c": "red" | "blue"}`); the
    trainer launches it with `--tool-strict-level parameter`."""
    model, _tok = hf
    uuid, creds = client.begin_episode()
    oc = creds.as_openai_client()
    ask = [{"role": "user", "content": "pick a colour"}]
    forced = oc.chat.completions.create(model="x", messages=ask, tools=PICK, tool_choice="required", max_tokens=60)
    assert called(forced.choices[0].message) and set(called(forced.choices[0].message)) <= {"pick", "skip"}
    named = oc.chat.completions.create(
        model="x", messages=ask, tools=PICK, tool_choice={"type": "function", "function": {"name": "skip"}},
        max_tokens=60,
    )  # fmt: skip
    assert set(called(named.choices[0].message)) == {"skip"}, named.choices[0].message
    for answer in (forced, named):  # the untrained model pads with blanks (vLLM's tool grammar allows any)
        assert follows_pick_schema(answer.choices[0].message), answer.choices[0].message
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "v", "schema": schema}}
    shaped = oc.chat.completions.create(model="x", messages=ask, response_format=fmt, max_tokens=30)
    assert json.loads(shaped.choices[0].message.content) in ({"ok": True}, {"ok": False})
    greedy = oc.chat.completions.create(model="x", messages=ask, temperature=0, max_tokens=8)
    top1 = oc.chat.completions.create(model="x", messages=ask, temperature=1.0, max_tokens=8, extra_body={"top_k": 1})
    assert top1.choices[0].message.content == greedy.choices[0].message.content  # top_k=1 is argmax
    calls = [logged_call(store, uuid, n) for n in range(1, 6)]
    assert all(c.error is None and c.completion_ids and len(c.logprobs) == len(c.completion_ids) for c in calls)
    for c in calls[:3]:  # constrained
        ref = completion_logprobs(model, c.prompt_ids, c.completion_ids)
        diffs = [a - b for a, b in zip(c.logprobs, ref)]
        assert min(diffs) > -EXACT and max(diffs) > 0.01, diffs


class Running:
    """The one running server as the `Launch` an experiment's `ServedAdapters` loads its adapters into."""

    def __init__(self, engine: VllmServer):
        self.engines, self.by_name, self.base_url = [engine], {"vllm-0": engine}, engine.base_url

    def drop_exited(self) -> bool:
        return False


def test_lora_adapters_hot_load_answer_as_peft_and_old_ones_unload(vllm, hf, trained, tmp_path):
    model, _tok = hf
    adapters = ServedAdapters(Running(vllm), None, tmp_path, "default", keep=2, release=lambda: None)
    try:
        for step in (1, 2, 3):
            assert adapters.serve(step, random_adapter(trained[1], tmp_path, step)) == f"policy@default@{step}"
        served = {m["id"] for m in httpx.get(vllm.base_url + "/models").json()["data"]}
        assert served == {"policy", "judge", "policy@default@2", "policy@default@3"}  # step 1's unloaded (keep 2)
        assert chat(vllm, "policy@default@1").status_code == 404
        got = chat(vllm, "policy@default@3").json()
        config = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear")
        peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(trained[1]), config)
        peft_model.load_adapter(str(tmp_path / "adapter_3"), adapter_name="default")
        gap = answer_gaps(got, peft_model.eval())
        assert max(gap) < EXACT, gap
        assert max(answer_gaps(got, model)) > 0.01  # the adapter, not the base model, answered
    finally:  # the module's later tests load adapters of other targets (lm_head): docs/experiments.md, limits
        adapters.stop()
    assert chat(vllm, "policy@default@3").status_code == 404


def test_a_lora_jobs_base_is_served_as_the_judge(vllm, hf):
    """vLLM launched for a LoRA job serves its base under `judge` too (`--served-model-name policy judge`): the
    judge answers as the base model, whatever adapters are loaded beside it."""
    got = chat(vllm, "judge")
    assert got.status_code == 200, got.text
    assert max(answer_gaps(got.json(), hf[0])) < EXACT


def test_an_answer_in_flight_finishes_on_its_adapter_while_the_next_step_loads(vllm, trained, tmp_path):
    """Asynchronous training on vLLM: the trainer loads step N+1's adapter (a name of its own) while calls on step
    N's run. The load is sent once the call has sampled 8 of its 100 tokens; the call ends as step N's model alone would
    answer it, and the next call is step N+1's."""
    import threading

    adapters = ServedAdapters(Running(vllm), None, tmp_path, "default", keep=2, release=lambda: None)
    paths = [random_adapter(trained[1], tmp_path, seed) for seed in (21, 22)]
    body = {"model": adapters.serve(0, paths[0]), "messages": MSGS, "max_tokens": CAP, "ignore_eos": True,
            "logprobs": True, "return_token_ids": True, "seed": 3}  # fmt: skip
    answers: dict[str, dict] = {}
    try:
        start = prometheus_counter(httpx.get(vllm.base + "/metrics").text, "vllm:generation_tokens_total")
        call = threading.Thread(target=lambda: answers.update(old=_post(vllm, body)))
        call.start()
        while prometheus_counter(httpx.get(vllm.base + "/metrics").text, "vllm:generation_tokens_total") < start + 8:
            time.sleep(0.02)
        assert adapters.serve(1, paths[1]) == "policy@default@1"  # loaded under the answer in flight
        call.join(300)
        answers["new"] = _post(vllm, {**body, "model": "policy@default@1", "max_tokens": 8})
        assert len(answers["old"]["choices"][0]["token_ids"]) == CAP
        for name, path in (("old", paths[0]), ("new", paths[1])):
            assert max(answer_gaps(answers[name], adapter_model(trained[1], path))) < EXACT, name
    finally:
        adapters.stop()


def _post(vllm: VllmServer, body: dict) -> dict:
    answer = httpx.post(vllm.base_url + "/chat/completions", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_two_adapters_served_at_once_each_answer_as_their_peft_model(vllm, trained, tmp_path):
    """vLLM serving several adapters of one base at once (`--max-loras`, loaded and unloaded at runtime under names
    of our choosing, as experiments will be): calls to both, sent together, each answer as their own adapter."""
    import asyncio

    paths = {name: random_adapter(trained[1], tmp_path, seed) for name, seed in (("red", 11), ("blue", 12))}
    for name, path in paths.items():
        vllm.load_adapter(f"policy@{name}", path)
    try:
        served = {m["id"] for m in httpx.get(vllm.base_url + "/models").json()["data"]}
        assert {"policy@red", "policy@blue"} <= served

        async def ask(model: str) -> dict:
            body = {"model": model, "messages": MSGS, "max_tokens": 6, "logprobs": True, "return_token_ids": True,
                    "seed": 1}  # fmt: skip
            async with httpx.AsyncClient(timeout=120) as c:
                return (await c.post(vllm.base_url + "/chat/completions", json=body)).json()

        async def both() -> list[dict]:
            return await asyncio.gather(ask("policy@red"), ask("policy@blue"))

        for name, answer in zip(paths, asyncio.run(both())):
            assert max(answer_gaps(answer, adapter_model(trained[1], paths[name]))) < EXACT, name
    finally:
        for name in paths:
            vllm.unload_adapter(f"policy@{name}")
    assert chat(vllm, "policy@red").status_code == 404


def test_full_weights_reload_in_place(vllm, hf, trained, tmp_path):
    model, _tok = hf
    changed = AutoModelForCausalLM.from_pretrained(trained[1])
    with torch.no_grad():
        for p in changed.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    changed.save_pretrained(str(tmp_path / "step_1"))
    try:
        t0 = time.perf_counter()
        vllm.reload_weights(tmp_path / "step_1")
        reload_s = time.perf_counter() - t0
        assert max(answer_gaps(chat(vllm).json(), changed.eval())) < EXACT  # every weight, both embeddings
        assert reload_s < 30
    finally:
        vllm.reload_weights(trained[1])  # the module's other tests expect the exported weights
    assert max(answer_gaps(chat(vllm).json(), model)) < EXACT


SAID = "It is sunny in Paris."


@pytest.mark.parametrize("responses", [False, True], ids=["chat-completions", "responses"])
def test_the_agents_sdk_default_agent_runs_on_real_vllm(client, store, responses):
    """The Agents SDK's agent on vLLM. Its chat-completions model: vLLM's structured outputs make the untrained
    model say one sentence. Its default Responses model (which carries no such extra field): the model answers
    freely, cut by the job's cap (vLLM's server-wide limit), which reaches the SDK as a completed response, not
    `incomplete` (the SDK raises on that)."""
    import asyncio

    import openai
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    uuid, creds = client.begin_episode()
    oc = openai.AsyncOpenAI(base_url=creds.base_url, api_key=creds.api_key)
    if responses:
        agent = Agent(name="talker", instructions="Talk.", model=OpenAIResponsesModel(model="policy", openai_client=oc))
    else:
        settings = ModelSettings(extra_body={"structured_outputs": {"choice": [SAID]}})
        model = OpenAIChatCompletionsModel(model="policy", openai_client=oc)
        agent = Agent(name="talker", instructions="Talk.", model=model, model_settings=settings)
    final = asyncio.run(Runner.run(agent, "What is the weather in Paris?")).final_output
    call = logged_call(store, uuid)
    assert call.error is None and call.completion_ids and len(call.logprobs) == len(call.completion_ids)
    if responses:
        assert final and call.truncated == (len(call.completion_ids) == CAP)
    else:
        assert final == SAID


def test_smolagents_code_agent_runs_on_real_vllm(client, store):
    """smolagents' CodeAgent with its default (8.7k-token) prompt on vLLM, whose structured outputs make the
    untrained model write the final step."""
    from smolagents import CodeAgent, OpenAIServerModel

    uuid, creds = client.begin_episode()
    step = "Thought: done.\n<code>\nfinal_answer(5)\n</code>"
    model = OpenAIServerModel(model_id="policy", api_base=creds.base_url, api_key=creds.api_key,
                              extra_body={"structured_outputs": {"choice": [step]}})  # fmt: skip
    assert CodeAgent(tools=[], model=model).run("What is 2+3?") == 5
    call = logged_call(store, uuid)
    assert call.error is None and len(call.prompt_ids) > 8_000 and call.completion_ids


def test_an_adapter_on_the_output_layer_answers_as_its_peft_model(vllm, trained, tmp_path):
    """LoRA on `lm_head` too (what makes an adapter learn on a random base: docs/experiments.md) is served by vLLM
    exactly as peft computes it.

    Last of the module's tests on the server it shares: vLLM 0.32's CPU LoRA ops index the output layer's slots with the
    request's slot number, and a call without adapter (-1) reads the last slot, so once an lm_head adapter sat there
    the base model's answers carry its output-layer delta, also after it is unloaded (found here by test order;
    docs/experiments.md, limits)."""
    from tests.support.adapter_letters import LETTER_HEAD

    torch.manual_seed(5)
    config = LoraConfig(**{**LETTER_HEAD.to_dict(), "init_lora_weights": False})
    peft = get_peft_model(AutoModelForCausalLM.from_pretrained(trained[1]), config)
    peft.save_pretrained(str(tmp_path / "head"), save_embedding_layers=False)
    vllm.load_adapter("policy@head", tmp_path / "head")
    try:
        answer = chat(vllm, "policy@head").json()
        assert max(answer_gaps(answer, adapter_model(trained[1], tmp_path / "head"))) < EXACT
    finally:
        vllm.unload_adapter("policy@head")


def test_vllm_frees_the_row_of_a_client_that_leaves(tmp_path):
    """vLLM's side of an agent that leaves (the proxy closes its connection to the engine then:
    tests/trainer/embedded/test_engine_abort.py): a stream of 4,000 tokens whose client leaves after its first chunks
    leaves vLLM's running set having generated a small share of them (had it finished, it would have made 4,000).
    A server of its own: the module's caps answers at the job's per-turn limit."""
    vllm = start_vllm(tmp_path, max_model_len=8192)
    try:
        _left_stream_is_aborted(vllm)
    finally:
        vllm.stop()


def _left_stream_is_aborted(vllm: VllmServer) -> None:
    url = vllm.base_url.removesuffix("/v1") + "/metrics"

    def running() -> float:
        return prometheus_counter(httpx.get(url, timeout=30).text, "vllm:num_requests_running")

    def wait(cond, what: str) -> None:
        deadline = time.monotonic() + 60
        while not cond():
            assert time.monotonic() < deadline, what
            time.sleep(0.05)

    before = prometheus_counter(httpx.get(url, timeout=30).text, "vllm:generation_tokens_total")
    body = {"model": "policy", "messages": MSGS, "max_tokens": 4000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", vllm.base_url + "/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        next(lines)
        wait(lambda: running() == 1, "the request never showed as running")  # the gauge is live for it
    wait(lambda: running() == 0, "vLLM kept the request running after its client left")
    generated = prometheus_counter(httpx.get(url, timeout=30).text, "vllm:generation_tokens_total") - before
    assert generated < 2000, generated


def test_vllm_and_the_embedded_engine_render_a_tool_to_the_same_tokens(vllm, hf):
    """A tool without a description, keys out of order and an extra key: vLLM's `/tokenize` (its request model
    dumps the tool) and the embedded engine's rendering (`chat_render.template_tool`) give the same ids."""
    from ajet_trainer.chat_render import render_ids

    tool = {"function": {"parameters": {"type": "object", "properties": {"q": {"type": "string"}}}, "name": "look",
                         "x-note": "kept by no engine"}, "type": "function"}  # fmt: skip
    messages = [{"role": "user", "content": "look it up"}]
    body = {"model": "policy", "messages": messages, "tools": [tool], "add_generation_prompt": True}
    answer = httpx.post(vllm.base_url.removesuffix("/v1") + "/tokenize", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["tokens"] == render_ids(hf[1], messages, [tool])
