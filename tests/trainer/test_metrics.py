"""Experiment tracking through verl's `Tracking`: TensorBoard event files and an offline wandb run in the
experiment folder, beside `metrics.jsonl`; the job names its loggers."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest
from pydantic import ValidationError

from ajet.job import AgentJetJob
from ajet_trainer.metrics import MetricsLog

STEPS = [
    {"loss": 0.5, "reward_mean": 0.25, "samples/episodes": 4, "flag": True},
    {"loss": 0.25, "reward_mean": 0.75, "samples/episodes": 4, "nan": float("nan")},
]


def _write(exp, job):
    log = MetricsLog(exp, job)
    for step, m in enumerate(STEPS, start=1):
        log.write(step, m)
    log.close()
    return [json.loads(line) for line in (exp / "metrics.jsonl").read_text().splitlines()]


def test_jobs_name_their_loggers():
    assert AgentJetJob().logging == ["jsonl"]
    assert AgentJetJob(logging="tensorboard").logging == ["tensorboard"]  # as the seed writes it
    with pytest.raises(ValidationError, match="unknown logger 'tensorbord'"):
        AgentJetJob(logging=["jsonl", "tensorbord"])


def test_tensorboard_event_files(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rows = _write(tmp_path, AgentJetJob(logging=["jsonl", "tensorboard"]))
    assert [r["step"] for r in rows] == [1, 2] and rows[1]["nan"] is None
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert events, list(tmp_path.rglob("*"))
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    loss = acc.Scalars("loss")
    assert [(e.step, e.value) for e in loss] == [(1, 0.5), (2, 0.25)]
    assert "nan" not in acc.Tags()["scalars"] and "flag" not in acc.Tags()["scalars"]


def test_wandb_offline_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    _write(tmp_path, AgentJetJob(logging=["wandb"], project_name="p", experiment_name="e"))
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, list(tmp_path.rglob("*"))
    (record,) = runs[0].glob("run-*.wandb")  # what `wandb sync` uploads later
    data = _settled(record)
    # history records carry each key with its JSON value (wandb 0.31 ships no Python reader for the file)
    for key, value in (("loss", "0.5"), ("loss", "0.25"), ("reward_mean", "0.75"), ("samples/episodes", "4")):
        assert key.encode() in data and value.encode() in data, (key, value)


def _settled(path, timeout: float = 30.0) -> bytes:
    """The file's bytes once its writer (wandb's service process, which may lag `finish` under load) has stopped
    growing it."""
    deadline, last = time.monotonic() + timeout, b""
    while time.monotonic() < deadline:
        data = path.read_bytes()
        if data == last and len(data) > 64:
            return data
        last = data
        time.sleep(0.5)
    return last


def test_engine_metrics_are_the_difference_of_two_readings():
    from ajet_trainer.types import EngineCounters, PhaseTimes, engine_metrics

    before, now = EngineCounters(4, 40, 1.0, 10, 300), EngineCounters(6, 100, 2.5, 25, 420)
    m = engine_metrics(before, now, seconds=3.0)
    assert m == {"partial/generated_answers": 2.0, "partial/generated_answer_tokens_mean": 30.0,
                 "engine/busy_share": 0.5, "partial/reprefilled_tokens": 15.0,
                 "engine/cached_prompt_tokens": 120.0}  # fmt: skip
    phases = engine_metrics(
        replace(before, phases=PhaseTimes(prefill_s=1.0, prefill_tokens=100, decode_steps=7)),
        replace(now, phases=PhaseTimes(prefill_s=1.5, prefill_tokens=160, decode_steps=9, sample_s=0.25)),
        seconds=3.0,
    )
    assert {k: v for k, v in phases.items() if k not in m} == {
        "engine/prefill_s": 0.5, "engine/prefill_tokens": 60.0, "engine/decode_s": 0.0, "engine/decode_steps": 2.0,
        "engine/decode_tokens": 0.0, "engine/constrain_s": 0.0, "engine/sample_s": 0.25,
    }  # fmt: skip
    vllm = engine_metrics(EngineCounters(1, 5), EngineCounters(1, 5), seconds=1.0)
    assert vllm == {"partial/generated_answers": 0.0, "partial/generated_answer_tokens_mean": 0.0}
