"""The template preflight at `sync_train_config` (issue 39): a real trainer runs the job's template through the
token history's shapes when the job is synced; the sync's answer carries the verdict, the status keeps it, and the
SDK logs it once at the client."""

from __future__ import annotations

import logging
import time

import httpx

from ajet import AgentJetJob
from ajet.types import OkResponse
from tests.support.swarm import running_swarm


def _beating(sw) -> None:
    """Wait for the trainer's first heartbeat: the proxy waits for a preflight only from a trainer that beats."""
    store, deadline = sw.store(), time.monotonic() + 120
    while store.experiment().trainer_heartbeat is None:
        assert time.monotonic() < deadline, sw.logs()
        time.sleep(0.2)


def test_the_sync_answer_carries_the_verdict_and_the_client_logs_it_once(tmp_path, caplog):
    with running_swarm(tmp_path, name="preflight") as sw:
        _beating(sw)
        job = AgentJetJob(model="builtin:tiny-bpe-gemma3", batch_size=1, num_repeat=1)
        answer = OkResponse.model_validate(
            httpx.post(f"{sw.url}/swarm/sync_train_config", json={"job": job.to_wire()}, timeout=60).json()
        )
        verdict = answer.template
        assert verdict is not None and verdict.model == job.model, sw.logs()
        shapes = {s.shape: s for s in verdict.shapes}
        assert shapes["tool_loop"].error and "alternate" in shapes["tool_loop"].error  # Gemma 3 has no tool turn
        assert all(s.merges for name, s in shapes.items() if name != "tool_loop")
        assert verdict.rendered_merges is None and verdict.rendered_causes == ["refused: InvalidRequest"]

        client = sw.client()
        with caplog.at_level(logging.INFO, logger="ajet.client"):
            client.sync_train_config(job)
            client.sync_train_config(job)
            assert client.get_engine_status().template == verdict
        told = [r for r in caplog.records if "template preflight of builtin:tiny-bpe-gemma3" in r.getMessage()]
        assert len(told) == 1 and told[0].levelno == logging.WARNING and "tool_loop (" in told[0].getMessage()

        caplog.clear()
        with caplog.at_level(logging.INFO, logger="ajet.client"):
            client.sync_train_config(AgentJetJob(model="builtin:tiny-bpe-think", batch_size=1, num_repeat=1))
        (line,) = [r for r in caplog.records if "template preflight" in r.getMessage()]
        assert line.levelno == logging.INFO and "falls back" not in line.getMessage()
        assert "merges linear, tool_loop, two_agents, branches, compaction" in line.getMessage()
        assert client.get_engine_status().template.model == "builtin:tiny-bpe-think"
