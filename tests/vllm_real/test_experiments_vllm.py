"""The three letters experiments of tests/e2e/test_experiments_e2e.py through vLLM's CPU build (issue 40): one
`ajet-swarm start` with `--engine vllm`, three clients, each its own LoRA job on one base with a conflicting reward.
One vLLM server serves the three experiments, each from an adapter of its own from step 0, each step's adapter
hot-loaded under the experiment's name for it. The trainer is SIGKILLed midway: its vLLM server runs on, orphaned,
until the restarted trainer ends it and launches another; each experiment resumes from its own checkpoint, nothing
trained twice. Each reaches 0.8 on its own letter while the others run, and each experiment's served adapter, asked
greedily through vLLM itself, says its letter."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.support.letters_clients import LETTERS, folder_and_steps, served_by, start_clients, wait_past
from tests.support.real_vllm import vllm_python
from tests.support.swarm import running_swarm

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow, pytest.mark.timeout(1500)]
KILL_AT_STEP = 6
"""Every experiment past this step (a checkpoint at 5 behind it) when the trainer is killed."""


def greedy_letter(base_url: str, model: str) -> str:
    """The first letter `model` on the vLLM server at `base_url` says, greedily, to the clients' prompt."""
    body = {"model": model, "messages": [{"role": "user", "content": "Say a letter"}], "max_tokens": 1,
            "temperature": 0}  # fmt: skip
    answer = httpx.post(base_url + "/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    return (answer.json()["choices"][0]["message"]["content"] or "")[:1]


def left_servers(root: Path) -> dict[int, list[str]]:
    """The vLLM servers the trainer launched under `root` that run now: pid -> command (their `vllm-*.pid`)."""
    out = {}
    for path in root.rglob("vllm-*.pid"):
        record = json.loads(path.read_text())
        out[record["pid"]] = record["cmd"]
    return {pid: cmd for pid, cmd in out.items() if running(pid, cmd)}


def running(pid: int, cmd: list[str]) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1] == [c.encode() for c in cmd]
    except OSError:
        return False


def last_adapter(sw, name: str) -> str:
    """Experiment `name`'s registered adapter once it is its last step's (a client that reached the target may have
    left a batch the trainer still trains); its steps are consecutive in its store, none twice, none skipped."""
    deadline = time.monotonic() + 120
    while True:
        _folder, steps = folder_and_steps(sw, name)
        assert steps == list(range(1, len(steps) + 1)), (name, steps)
        model = served_by(sw)[name][1]
        if model.endswith(f"@{steps[-1]}"):
            return model
        assert time.monotonic() < deadline, (name, model, steps)
        time.sleep(0.5)


def test_three_experiments_learn_their_own_letters_on_one_vllm_server(tmp_path):
    vllm_python()
    with running_swarm(tmp_path, name="v", engine="vllm") as sw:
        runs, threads = start_clients(sw.url)
        wait_past(runs, KILL_AT_STEP)
        before = left_servers(tmp_path)
        assert len(before) == 1, before  # one server for the three
        sw.trainer.kill()  # SIGKILL mid-run: the server runs on, orphaned, until the next trainer ends it
        sw.start_trainer(engine="vllm")
        for t in threads:
            t.join(1200)
        assert not any(running(pid, cmd) for pid, cmd in before.items())
        assert all(r.error is None for r in runs), [r.error for r in runs]
        assert all(r.reached() for r in runs), ({r.name: r.rewards for r in runs}, sw.logs())
        served = served_by(sw)
        urls = {url for url, _ in served.values()}
        assert len(urls) == 1, served  # one vLLM server
        (url,) = urls
        listed = {m["id"] for m in httpx.get(url + "/models", timeout=30).json()["data"]}
        assert {model for _, model in served.values()} <= listed and len({m for _, m in served.values()}) == 3
        for name, letter in LETTERS.items():
            model = last_adapter(sw, name)
            assert greedy_letter(url, model) == letter, name
