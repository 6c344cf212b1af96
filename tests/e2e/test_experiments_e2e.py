"""Three experiments on one swarm (issue 40's first "done when", on the embedded engine): one `ajet-proxy` and one
`ajet-trainer`, three clients, each syncing its own LoRA job on one base (`builtin:demo`) with a conflicting reward
(one rewards the letter `a`, one `b`, one `c`). Each reaches 0.8 while the others run; the trainer is SIGKILLed
midway and restarted, and each experiment resumes from its own checkpoint with nothing trained twice; each exported
adapter, loaded alone on the base, says its own letter.

LoRA targets the output layer too (`tests/support/adapter_letters.LETTER_HEAD`): on this random base an adapter
without it stalls near 0.35 (`bench/shared_adapters.py`, docs/experiments.md)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import openai
import pytest
import torch
from peft import PeftModel

from ajet import AgentJetJob, Conflict, SwarmClient, Task, Unauthorized, WorkflowOutput
from ajet_store import experiment_store
from ajet_store.placement import experiment_slug
from ajet_trainer.daemon import experiment_folder
from ajet_trainer.model_export import export_model
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path
from tests.support.adapter_letters import BASE, LETTER_HEAD, letter_prompt
from tests.support.swarm import Swarm, running_swarm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
LETTERS = {"ea": "a", "eb": "b", "ec": "c"}
GROUP = 8
TARGET = 0.8
MAX_STEPS = 80
KILL_AT_STEP = 6
"""Every experiment past this step (a checkpoint at 5 behind it) when the trainer is killed."""


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
        self.retried = 0
        """Episodes played again because the killed trainer's engine broke them off."""

    def reached(self) -> bool:
        return len(self.rewards) >= 5 and sum(self.rewards[-5:]) / 5 >= TARGET

    def run(self) -> None:
        try:
            self.client.auto_sync_train_config_and_start_engine(letters_job(self.name))
            while not self.reached() and len(self.rewards) < MAX_STEPS:
                self.rewards.append(self._step())
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


def says(adapter: Path) -> str:
    """The first letter the base with `adapter` alone says, greedily, to the test's prompt."""
    base, tok = load_policy(str(builtin_model_path(BASE)), AgentJetJob(), "cpu")
    model = PeftModel.from_pretrained(base, str(adapter)).eval()
    ids = torch.tensor([letter_prompt(tok)])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=1, do_sample=False)
    return tok.decode(out[0, ids.shape[1] :])[:1]


def folder_and_steps(sw: Swarm, name: str) -> tuple[Path, list[int]]:
    """Experiment `name`'s folder and the steps its store recorded (the first experiment: the swarm's own)."""
    first = sw.store()
    if first.experiment().job.experiment_name == name:
        return sw.exp_dir, [s.step for s in first.steps()]
    slug = experiment_slug(f"letters/{name}")
    with experiment_store(first, f"letters/{name}") as st:
        return Path(experiment_folder(str(sw.exp_dir), slug)), [s.step for s in st.steps()]


def test_three_experiments_learn_their_own_letters_on_one_swarm(tmp_path):
    with running_swarm(tmp_path) as sw:
        runs = [Experiment(sw.url, name) for name in LETTERS]
        threads = [threading.Thread(target=r.run, name=r.name) for r in runs]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 600
        while min(len(r.rewards) for r in runs) < KILL_AT_STEP and time.monotonic() < deadline:
            assert all(r.error is None for r in runs), [r.error for r in runs]
            time.sleep(0.2)
        sw.trainer.kill()  # SIGKILL mid-run: each experiment resumes from its own last checkpoint
        sw.start_trainer()
        for t in threads:
            t.join(900)
        assert all(r.error is None for r in runs), [r.error for r in runs]
        assert all(r.reached() for r in runs), ({r.name: r.rewards for r in runs}, sw.logs())
        assert len(sw.store().experiment_entries()) == 2  # the first client's experiment is the swarm's first
        for name, letter in LETTERS.items():
            folder, steps = folder_and_steps(sw, name)
            assert steps == list(range(1, len(steps) + 1)), (name, steps)  # none twice, none skipped
            assert says(export_model(folder, tmp_path / f"export-{name}")) == letter, name
