"""Clients of a swarm training several experiments, each its own LoRA job on one base (`builtin:demo`) rewarded for
its own letter (tests/support/adapter_letters.py's task through a whole swarm). Shared by
tests/e2e/test_experiments_e2e.py, tests/vllm_real/test_experiments_vllm.py and `bench/experiments.py`."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import openai
import torch
from peft import PeftModel

from ajet import AgentJetJob, Conflict, SwarmClient, Task, Unauthorized, WorkflowOutput
from ajet_store import experiment_store
from ajet_store.placement import experiment_slug
from ajet_trainer.experiment_dir import experiment_folder
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path
from tests.support.adapter_letters import BASE, LETTER_HEAD, letter_prompt
from tests.support.swarm import Swarm

LETTERS = {"ea": "n", "eb": "t", "ec": "E"}
"""The three letters the base says most often first to "Say a letter" (1.81%, 1.77% and 1.74% of its first answers;
`a`, `b` and `c`: 0.71%, 1.06% and 0.68%). Until an answer first says its letter a group has no signal: with 8
answers a step that is about 7.6 steps on average against 18.9 for `c`, and the tests wait for the slowest."""
GROUP = 8
TARGET = 0.8
MAX_STEPS = 160
"""A client's step budget: the first answer with the letter is a geometric draw, with a long tail (with `a`, `b`, `c`,
`bench.experiments`' together arm once took 123 steps for `c`, and once did not reach 0.8 in 80)."""


def letters_job(name: str) -> AgentJetJob:
    return AgentJetJob(
        project_name="letters",
        experiment_name=name,
        model=BASE,
        lr=1e-2,
        lora_rank=8,
        lora_alpha=16,
        lora_target_modules=sorted(LETTER_HEAD.target_modules),
        batch_size=1,
        num_repeat=GROUP,
        max_prompt_length=64,
        max_response_length=16,
        max_model_len=128,
        max_response_length_in_one_turn=2,
        save_freq=5,
        n_gpu=1,
    )


class Experiment:
    """One client's loop: GROUP answers a step to "Say a letter", each rewarded 1 when it starts with the letter."""

    def __init__(self, url: str, name: str):
        self.name, self.letter = name, LETTERS[name]
        self.client = SwarmClient(url, verbose=False)
        self.rewards: list[float] = []
        self.error: BaseException | None = None
        self.seconds = 0.0
        """Wall seconds from the sync to the target (or to the last step)."""
        self.retried = 0
        """Episodes played again because the killed trainer's engine broke them off."""

    def reached(self) -> bool:
        return len(self.rewards) >= 5 and sum(self.rewards[-5:]) / 5 >= TARGET

    def run(self) -> None:
        t0 = time.monotonic()
        try:
            self.client.auto_sync_train_config_and_start_engine(letters_job(self.name))
            while not self.reached() and len(self.rewards) < MAX_STEPS:
                self.rewards.append(self._step())
            self.seconds = time.monotonic() - t0
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            self.error = exc

    def _step(self) -> float:
        rewards: list[float] = []
        while len(rewards) < GROUP:
            uuid, creds = self.client.begin_episode()
            try:
                answer = creds.as_openai_client().chat.completions.create(
                    model="policy", messages=[{"role": "user", "content": "Say a letter"}], max_tokens=1
                )
            except openai.APIError:  # the trainer was killed under the call (its engine with it): play it again
                self.retried += 1
                continue
            reward = float((answer.choices[0].message.content or "")[:1] == self.letter)
            try:
                self.client.end_episode(Task(task_id="say"), uuid, WorkflowOutput(reward=reward))
            except (Conflict, Unauthorized):  # aborted by the restart (its key no longer works): play it again
                self.retried += 1
                continue
            rewards.append(reward)
        return sum(rewards) / GROUP


def start_clients(url: str) -> tuple[list[Experiment], list[threading.Thread]]:
    """One client per letter against the swarm at `url`, each running in a thread of its own."""
    runs = [Experiment(url, name) for name in LETTERS]
    threads = [threading.Thread(target=r.run, name=r.name) for r in runs]
    for t in threads:
        t.start()
    return runs, threads


def wait_past(runs: list[Experiment], steps: int, timeout: float = 600) -> None:
    """Wait until every client has taken `steps` steps (none failing meanwhile)."""
    deadline = time.monotonic() + timeout
    while min(len(r.rewards) for r in runs) < steps and time.monotonic() < deadline:
        assert all(r.error is None for r in runs), [r.error for r in runs]
        time.sleep(0.2)


def says(adapter: Path) -> str:
    """The first letter the base with `adapter` alone says, greedily, to the test's prompt."""
    base, tok = load_policy(str(builtin_model_path(BASE)), AgentJetJob(), "cpu")
    model = PeftModel.from_pretrained(base, str(adapter)).eval()
    ids = torch.tensor([letter_prompt(tok)])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=1, do_sample=False)
    return tok.decode(out[0, ids.shape[1] :])[:1]


def folder_and_steps(sw: Swarm, name: str) -> tuple[Path, list[int]]:
    """Experiment `name`'s folder and the steps its store recorded (the default experiment: the swarm's own)."""
    first = sw.store()
    if first.experiment().job.experiment_name == name:
        return sw.exp_dir, [s.step for s in first.steps()]
    slug = experiment_slug(f"letters/{name}")
    with experiment_store(first, f"letters/{name}") as st:
        return Path(experiment_folder(str(sw.exp_dir), slug)), [s.step for s in st.steps()]


def served_by(sw: Swarm) -> dict[str, tuple[str, str]]:
    """Each experiment's registered engine: (base URL, served model name)."""
    out = {}
    first = sw.store()
    for name in LETTERS:
        if first.experiment().job.experiment_name == name:
            (engine,) = first.engines()
        else:
            with experiment_store(first, f"letters/{name}") as st:
                (engine,) = st.engines()
        out[name] = (engine.base_url, engine.model)
    return out
