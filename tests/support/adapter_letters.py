"""Several experiments' LoRA adapters on one base learning conflicting letters: the prompt "Say a letter", one
adapter rewarded for `a`, one for `b`, ... Shared by the adapters' test and `bench/shared_adapters.py`."""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

import torch
from peft import LoraConfig, get_peft_model

from ajet import AgentJetJob
from ajet_trainer.embedded.generation import generate_batch
from ajet_trainer.embedded.learner import Learner
from ajet_trainer.embedded.server import eos_token_ids
from ajet_trainer.embedded.types import GenRequest, GenResult
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path
from ajet_trainer.types import EpisodeSample, TrainSequence

BASE = "builtin:demo"
LETTER_HEAD = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                             "up_proj", "down_proj", "lm_head"])  # fmt: skip
"""LoRA on every linear layer and the output layer: on a random base an adapter without `lm_head` stalls near 0.2
(the final norm bounds how far the hidden state can push one letter's logit); with it, it learns."""
JOB = AgentJetJob(lr=1e-2, lora_rank=8, max_prompt_length=64, max_response_length=16, max_model_len=128)
GROUP = 8
"""Answers per adapter per step (one GRPO group)."""


@dataclass
class Run:
    """How the adapters' learning went."""

    steps: dict[str, int] = field(default_factory=dict)
    """Steps each adapter took to its target (or the most allowed)."""
    recent: dict[str, list[float]] = field(default_factory=dict)
    """Each adapter's last five steps' mean rewards."""
    best: dict[str, float] = field(default_factory=dict)
    """Each adapter's best five-step mean reward."""
    seconds: float = 0.0
    """Wall time of the whole run."""

    def reached(self, target: float) -> bool:
        return all(r and sum(r) / len(r) >= target for r in self.recent.values())


ALL_LINEAR = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear")
"""peft's "all-linear": every linear layer but the output layer (the job's default `lora_target_modules`)."""


def letter_model(names: list[str], seed: int = 0, config: LoraConfig = LETTER_HEAD):
    """The base with one adapter per name (the first active), in eval mode, and its tokenizer. Each adapter gets a
    copy of `config`: peft writes the base model's path into the config it is given, and the shared constants must
    stay as declared for the next test (a config naming another base warns, and warnings fail the tests)."""
    base, tok = load_policy(str(builtin_model_path(BASE)), AgentJetJob(), "cpu")
    torch.manual_seed(seed)
    model = get_peft_model(base, copy.deepcopy(config), adapter_name=names[0])
    for name in names[1:]:
        model.add_adapter(name, copy.deepcopy(config))
    return model.eval(), tok


def letter_prompt(tok) -> list[int]:
    text = tok.apply_chat_template([{"role": "user", "content": "Say a letter"}], add_generation_prompt=True,
                                   tokenize=False)  # fmt: skip
    return tok(text, add_special_tokens=False)["input_ids"]


def _samples(tok, prompt: list[int], results: list[GenResult], letter: str, step: int, name: str):
    out = []
    for i, r in enumerate(results):
        reward = 1.0 if tok.decode(r.token_ids)[:1] == letter else 0.0
        seq = TrainSequence(f"{name}{step}-{i}", name, tuple(prompt), tuple(r.token_ids), (1,), tuple(r.logprobs))
        out.append(EpisodeSample(seq.episode_uuid, name, reward, (seq,)))
    return out


def train_letters(model, tok, letters: dict[str, str], max_steps: int, target: float = 0.8) -> Run:
    """Train the adapters named in `letters` together: each step samples all of them in one mixed batch (`GROUP`
    answers each) and updates each with its own learner, until every one's last five steps average `target`."""
    learners = {name: Learner(model, tok, JOB, adapter=name) for name in letters}
    prompt, eos, run, t0 = letter_prompt(tok), eos_token_ids(model, tok), Run(), time.perf_counter()
    run.recent = {name: [] for name in letters}
    for step in range(max_steps):
        live = [n for n in letters if n not in run.steps]
        reqs = [GenRequest(prompt, 1, seed=step * 100 + i, adapter=n) for n in live for i in range(GROUP)]
        results = generate_batch(model, tok, reqs, eos)
        for k, name in enumerate(live):
            samples = _samples(tok, prompt, results[k * GROUP : (k + 1) * GROUP], letters[name], step, name)
            run.recent[name] = (run.recent[name] + [sum(s.reward for s in samples) / GROUP])[-5:]
            learners[name].update(samples, seed=step)
            if step >= 4:
                run.best[name] = max(run.best.get(name, 0.0), sum(run.recent[name]) / 5)
            if run.best.get(name, 0.0) >= target:
                run.steps[name] = step + 1
        if len(run.steps) == len(letters):
            break
    run.seconds = time.perf_counter() - t0
    return run
