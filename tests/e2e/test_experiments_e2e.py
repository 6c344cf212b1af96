"""Three experiments on one swarm (issue 40's first "done when", on the embedded engine): one `ajet-proxy` and one
`ajet-trainer`, three clients, each syncing its own LoRA job on one base (`builtin:demo`) with a conflicting reward
(each its own letter, one the base says often: `letters_clients.LETTERS`). Each reaches 0.8 while the others run;
the trainer is SIGKILLed midway and restarted, and each experiment resumes from its own checkpoint with nothing
trained twice; each exported adapter, loaded alone on the base, says its own letter.

LoRA targets the output layer too (`tests/support/adapter_letters.LETTER_HEAD`): on this random base an adapter
without it stalls near 0.35 (`bench/shared_adapters.py`, docs/experiments.md)."""

from __future__ import annotations

import time

import pytest
import torch

from ajet import AgentJetJob
from ajet.types import ExperimentState
from ajet_trainer.checkpoint import latest_checkpoint
from ajet_trainer.experiment_dir import folder_of_experiment
from ajet_trainer.model_export import export_model
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path
from tests.support.adapter_letters import BASE, letter_prompt
from tests.support.episodes import play_batch
from tests.support.letters_clients import LETTERS, folder_and_steps, says, served_by, start_clients, wait_past
from tests.support.rolling import wait_state, wait_step
from tests.support.swarm import running_swarm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
KILL_AT_STEP = 6
"""Every experiment past this step (a checkpoint at 5 behind it) when the trainer is killed."""


def test_three_experiments_learn_their_own_letters_on_one_swarm(tmp_path):
    with running_swarm(tmp_path) as sw:
        runs, threads = start_clients(sw.url)
        wait_past(runs, KILL_AT_STEP)
        served = served_by(sw)  # one base model, one engine: each experiment's adapter by its own name
        assert len({url for url, _ in served.values()}) == 1, served
        assert len({model for _, model in served.values()}) == 3, served
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
            assert folder_of_experiment(sw.exp_dir, f"letters/{name}") == folder  # what export-model finds by name
            assert says(export_model(folder, tmp_path / f"export-{name}")) == letter, name


def test_the_letters_are_the_ones_the_base_says_most_often_first():
    """The clients' letters are the base's three likeliest first letters (their docstring's figures), so the time to
    a group's first signal stays short; a change of the base that moves them fails here, not as a slow test."""
    base, tok = load_policy(str(builtin_model_path(BASE)), AgentJetJob(), "cpu")
    with torch.no_grad():
        first = base(torch.tensor([letter_prompt(tok)])).logits[0, -1].softmax(-1)
    by_letter = {tok.decode([i]): float(p) for i, p in enumerate(first) if len(tok.decode([i])) == 1}
    letters = sorted((c for c in by_letter if c.isalpha()), key=by_letter.__getitem__, reverse=True)
    assert set(LETTERS.values()) == set(letters[:3]), letters[:6]
    assert [round(by_letter[c] * 100, 2) for c in LETTERS.values()] == [1.81, 1.77, 1.74]


def test_an_experiment_stopped_beside_another_keeps_its_last_step_and_the_trainer_serves_on(tmp_path):
    """A second experiment on a shared base, stopped with a step not yet checkpointed: its final checkpoint is whole
    (export-model reads it) and the trainer, and the default experiment, go on. Stopping it used to detach its adapter
    from the model before that checkpoint, which then failed and took the trainer down with it."""

    def job(name: str) -> AgentJetJob:
        return AgentJetJob(project_name="p", experiment_name=name, model="builtin:tiny", lora_rank=8, batch_size=2,
                           num_repeat=2, max_prompt_length=64, max_response_length=16, max_model_len=128, n_gpu=1,
                           save_freq=0)  # fmt: skip

    with running_swarm(tmp_path) as sw:
        first, second = sw.client(verbose=False), sw.client(verbose=False)
        first.auto_sync_train_config_and_start_engine(job("first"))
        second.auto_sync_train_config_and_start_engine(job("second"))
        play_batch(second, 0)
        wait_step(second, 1, sw)
        second.stop_engine()
        wait_state(second, ExperimentState.OFFLINE, timeout=60)
        folder = folder_of_experiment(sw.exp_dir, "p/second")
        deadline = time.monotonic() + 60  # OFFLINE is the proxy's word; the trainer's teardown saves after it
        while latest_checkpoint(folder) is None:
            assert time.monotonic() < deadline and sw.trainer.proc.poll() is None, sw.logs()
            time.sleep(0.2)
        export_model(folder, tmp_path / "second-exported", merge_lora=True)  # its step 1, whole
        assert sw.trainer.proc.poll() is None, sw.logs()
        assert first.get_engine_status().state == ExperimentState.ROLLING
        play_batch(first, 0)
        wait_step(first, 1, sw)
