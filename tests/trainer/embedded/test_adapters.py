"""Several LoRA adapters on one base model (`ajet_trainer.embedded.adapters`): rows of different adapters sampled in
one batch by the embedded engine are each what their adapter alone samples, token for token; a learner trains one
adapter as if it were alone, leaving the others as they were."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

from ajet import AgentJetJob
from ajet_trainer.embedded.adapters import BatchAdapters, batch_adapters
from ajet_trainer.embedded.generation import generate_batch
from ajet_trainer.embedded.server import eos_token_ids
from ajet_trainer.embedded.types import GenRequest
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path

PROMPTS = [[5, 17, 42, 8], [9, 3], [5, 17, 42, 8], [11, 12, 13]]


CONFIG = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False)


def with_adapters(*names: str):
    """builtin:tiny with the named adapters (random, non-zero: trained ones' shape; the i-th drawn from seed i + 1),
    in eval mode as the trainer keeps it; the first active."""
    base, tok = load_policy(str(builtin_model_path("builtin:tiny")), AgentJetJob(), "cpu")
    model = None
    for i, name in enumerate(names):
        torch.manual_seed(i + 1)
        if model is None:
            model = get_peft_model(base, CONFIG, adapter_name=name)
        else:
            model.add_adapter(name, CONFIG)
    model.set_adapter(names[0])
    return model.eval(), tok


@pytest.fixture(scope="module")
def two_adapters():
    return with_adapters("red", "blue")


def _requests(names: list) -> list[GenRequest]:
    return [GenRequest(list(p), max_tokens=12, seed=10 + i, adapter=n) for i, (p, n) in enumerate(zip(PROMPTS, names))]


def test_rows_of_two_adapters_in_one_batch_are_each_as_their_adapter_alone(two_adapters):
    model, tok = two_adapters
    eos = eos_token_ids(model, tok)
    names = ["red", "blue", "blue", "red"]
    mixed = generate_batch(model, tok, _requests(names), eos)
    for name in ("red", "blue"):
        model.set_adapter(name)
        rows = [i for i, n in enumerate(names) if n == name]
        alone = generate_batch(model, tok, [_requests([None] * 4)[i] for i in rows], eos)
        for i, res in zip(rows, alone):
            assert mixed[i].token_ids == res.token_ids
            assert max(abs(x - y) for x, y in zip(mixed[i].logprobs, res.logprobs)) < 1e-5
    model.set_adapter("red")
    # rows 0 and 2 share a prompt; their adapters differ, and so do their first token's distributions
    first = [
        generate_batch(model, tok, [GenRequest(PROMPTS[0], 1, seed=3, adapter=n)], eos)[0] for n in ("red", "blue")
    ]
    assert abs(first[0].logprobs[0] - first[1].logprobs[0]) > 1e-3 or first[0].token_ids != first[1].token_ids


def test_a_row_without_an_adapter_takes_the_active_one_and_an_unknown_name_is_refused(two_adapters):
    model, tok = two_adapters
    eos = eos_token_ids(model, tok)
    model.set_adapter("blue")
    mixed = generate_batch(model, tok, _requests([None, "red", None, "red"]), eos)
    same = generate_batch(model, tok, _requests(["blue", "red", "blue", "red"]), eos)
    assert [r.token_ids for r in mixed] == [r.token_ids for r in same]
    with pytest.raises(ValueError, match="no LoRA adapter named green"):
        generate_batch(model, tok, _requests(["red", "green", None, None]), eos)
    model.set_adapter("red")


def test_a_batch_of_one_adapter_runs_peft_s_plain_path_and_leaves_the_model_as_it_was(two_adapters):
    """Rows all of one adapter skip the mixed-adapter path (slower: gathers per layer): the active one as it is,
    another made active in its LoRA layers for each forward only. Its answers are the adapter's alone, and the model's
    active adapter and which parameters are trainable are as before."""
    model, tok = two_adapters
    eos = eos_token_ids(model, tok)
    assert batch_adapters(model, ["red", None, "red", "red"]) == BatchAdapters()  # "red" is active: nothing to do
    assert batch_adapters(model, ["red", "blue", None, None]).kwargs == {"adapter_names": ["red", "blue", "red", "red"]}
    alone = batch_adapters(model, ["blue"] * 4)
    assert alone.alone == "blue" and not alone.kwargs and alone.layers
    trainable = {n: p.requires_grad for n, p in model.named_parameters()}
    served = generate_batch(model, tok, _requests(["blue"] * 4), eos)
    assert model.active_adapter == "red" and all(layer.active_adapters == ["red"] for layer in alone.layers)
    assert {n: p.requires_grad for n, p in model.named_parameters()} == trainable
    model.set_adapter("blue")
    expected = generate_batch(model, tok, _requests([None] * 4), eos)
    model.set_adapter("red")
    for got, want in zip(served, expected):
        assert got.token_ids == want.token_ids
        assert max(abs(x - y) for x, y in zip(got.logprobs, want.logprobs)) < 1e-5


def test_the_engine_serves_each_adapter_by_name_in_one_batch(two_adapters):
    """Over HTTP: `/v1/models` lists `policy@blue`, `policy@red` and `judge`; calls naming them, sent together, are
    batched and answered each by its adapter (the ids of a plain answer equal the adapter alone's); an adapter the
    engine does not hold is a 404 `model_not_found`, as vLLM answers it."""
    import asyncio

    import httpx

    from ajet_trainer.embedded.server import EmbeddedEngine

    model, tok = two_adapters
    eng = EmbeddedEngine(model, tok, max_tokens_cap=8, batch_window_s=0.25)  # a wide window: one batch
    url = eng.start()
    try:
        served = [m["id"] for m in httpx.get(url + "/models").json()["data"]]
        assert served == ["policy", "policy@blue", "policy@red", "judge"]

        async def ask(name: str) -> dict:
            body = {"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "seed": 4,
                    "return_token_ids": True, "logprobs": True}  # fmt: skip
            async with httpx.AsyncClient(timeout=120) as c:
                return (await c.post(url + "/chat/completions", json=body)).json()

        async def both() -> list[dict]:
            return await asyncio.gather(ask("policy@red"), ask("policy@blue"))

        answers = asyncio.run(both())
        assert eng.batcher.stats["max_batch_seen"] == 2
        for name, answer in zip(("red", "blue"), answers):
            model.set_adapter(name)
            req = GenRequest(answer["prompt_token_ids"], max_tokens=8, seed=4)
            alone = generate_batch(model, tok, [req], eos_token_ids(model, tok))[0]
            assert answer["choices"][0]["token_ids"] == alone.token_ids
        model.set_adapter("red")
        missing = httpx.post(url + "/chat/completions", json={"model": "policy@green", "messages": [{"role": "user",
                             "content": "hi"}]})  # fmt: skip
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
        # the job's per-turn cap (8) bounds the policy's answers, not the judge's (never trained: its context does)
        long = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 24, "min_tokens": 24}
        lengths = {name: httpx.post(url + "/chat/completions", json={**long, "model": name}, timeout=120).json()
                   ["usage"]["completion_tokens"] for name in ("policy@red", "judge")}  # fmt: skip
        assert lengths == {"policy@red": 8, "judge": 24}
    finally:
        eng.stop()


def test_a_learner_trains_its_adapter_as_if_alone_and_leaves_the_others_as_they_were():
    from ajet_trainer.embedded.learner import Learner
    from ajet_trainer.types import EpisodeSample, TrainSequence

    def sample(uuid: str, reward: float, resp: tuple[int, ...]) -> EpisodeSample:
        seq = TrainSequence(uuid, "t", (1, 2), resp, (1,) * len(resp), (0.0,) * len(resp))
        return EpisodeSample(uuid, "t", reward, (seq,))

    samples = [sample("a", 1.0, (40, 41)), sample("b", 0.0, (50, 51))]
    job = AgentJetJob(lr=1e-2, lora_rank=8, max_prompt_length=64, max_response_length=16, max_model_len=128)
    model, tok = with_adapters("blue", "red")  # red drawn from seed 2, as `alone` below draws it
    blue_before = {n: p.clone() for n, p in model.named_parameters() if ".blue." in n}
    red_learner, blue_learner = Learner(model, tok, job, adapter="red"), Learner(model, tok, job, adapter="blue")
    red_learner.update(samples)
    assert all(torch.equal(p, blue_before[n]) for n, p in model.named_parameters() if ".blue." in n)
    assert not blue_learner.optimizer.state and model.active_adapter == "blue"  # switched back after the update
    alone, _ = with_adapters("green", "red")  # the same red weights, on a model where red is trained alone
    alone.set_adapter("red")
    Learner(alone, tok, job, adapter="red").update(samples)
    trained = dict(model.named_parameters())
    untrained = dict(with_adapters("green", "red")[0].named_parameters())
    red = [n for n, _ in alone.named_parameters() if ".red." in n]
    alone_params = dict(alone.named_parameters())
    assert red and all(torch.allclose(trained[n], alone_params[n], atol=1e-6) for n in red)
    assert max(float((trained[n] - untrained[n]).detach().abs().max()) for n in red) > 1e-4  # the update moved red


def test_three_adapters_with_conflicting_rewards_each_learn_their_own_letter_sharing_every_batch(tmp_path):
    """Three experiments' adapters on one base (builtin:demo), the same prompt, rewards that conflict (one wants
    `a`, one `b`, one `c`): every step samples all three in one mixed batch and updates each with its own learner.
    Each reaches 0.8; then each adapter, saved and loaded alone on a fresh base, says its own letter."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tests.support.adapter_letters import BASE, letter_model, letter_prompt, train_letters

    letters = {"ea": "a", "eb": "b", "ec": "c"}
    model, tok = letter_model(list(letters))
    run = train_letters(model, tok, letters, max_steps=150)
    assert run.reached(0.8), run.recent
    prompt, eos = letter_prompt(tok), eos_token_ids(model, tok)
    for name, letter in letters.items():
        model.save_pretrained(str(tmp_path / name), selected_adapters=[name], save_embedding_layers=False)
        base = AutoModelForCausalLM.from_pretrained(str(builtin_model_path(BASE)))
        alone = PeftModel.from_pretrained(base, str(tmp_path / name / name)).eval()
        said = generate_batch(alone, tok, [GenRequest(prompt, 1, temperature=0.0)], eos)[0]
        assert tok.decode(said.token_ids) == letter, (name, tok.decode(said.token_ids))


def test_the_judge_is_the_base_without_any_adapter_in_the_same_batch(two_adapters):
    """`judge` names the frozen base: its rows go through no adapter, beside rows of an adapter in one batch, each
    as it would be alone (the base sampled with peft's adapters disabled)."""
    from ajet.errors import ModelNotFound
    from ajet_trainer.embedded.adapters import BASE_ROWS, JUDGE, requested_adapter, served_names

    model, tok = two_adapters
    eos = eos_token_ids(model, tok)
    assert requested_adapter(model, "policy", JUDGE) == BASE_ROWS and served_names(model, "policy")[-1] == JUDGE
    reqs = [GenRequest(list(PROMPTS[0]), max_tokens=12, seed=3, adapter=a) for a in (BASE_ROWS, "red", BASE_ROWS)]
    mixed = generate_batch(model, tok, reqs, eos)
    with model.disable_adapter():
        alone = generate_batch(model, tok, [GenRequest(list(PROMPTS[0]), max_tokens=12, seed=3)], eos)[0]
    assert mixed[0].token_ids == alone.token_ids == mixed[2].token_ids
    assert mixed[0].logprobs == pytest.approx(alone.logprobs, abs=1e-4)
    assert mixed[1].logprobs != pytest.approx(alone.logprobs, abs=1e-4)  # the adapter's row is the adapter's
    base, _ = load_policy(str(builtin_model_path("builtin:tiny")), AgentJetJob(), "cpu")
    with pytest.raises(ModelNotFound, match="the model `judge` needs a LoRA job"):
        requested_adapter(base, "policy", JUDGE)
