"""The check that an exported model is the policy the swarm served."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import requests
from transformers import AutoModelForCausalLM

from tests.support.logprobs import completion_logprobs
from tests.support.procs import offline_env


def assert_export_matches_the_served_policy(client, store, exp: Path, lora_rank: int) -> None:
    """`ajet-trainer export-model` of step 2 loads with transformers and gives the served policy's logprobs."""
    uuid, creds = client.begin_episode()  # sampled by policy v2, the weights of checkpoint step_2
    requests.post(
        f"{creds.base_url}/chat/completions",
        headers={"Authorization": f"Bearer {creds.api_key}"},
        json={
            "model": "m",
            "messages": [{"role": "user", "content": "Say the letter: a"}],
            "max_tokens": 4,
            "temperature": 1.0,
            "seed": 7,
        },
        timeout=60,
    ).raise_for_status()
    client.abort_episode(uuid)
    client.get_episode(uuid)  # answers once the call log is flushed
    (call,) = store.calls(uuid)
    assert call.policy_version == 2
    exports = {"plain": [], "merged": ["--merge-lora"]} if lora_rank else {"plain": []}
    for name, extra in exports.items():
        out = exp.parent / f"export-{name}"
        res = subprocess.run(
            [
                str(Path(sys.executable).parent / "ajet-trainer"),
                "export-model",
                "--experiment-dir",
                str(exp),
                "--step",
                "2",
                "--out",
                str(out),
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=offline_env(),
        )
        assert res.returncode == 0, res.stderr[-3000:]
        if name == "plain" and lora_rank:  # a peft adapter folder on the base model
            from peft import AutoPeftModelForCausalLM

            model = AutoPeftModelForCausalLM.from_pretrained(str(out))
        else:
            model = AutoModelForCausalLM.from_pretrained(str(out))
        got = completion_logprobs(model, call.prompt_ids, call.completion_ids)
        assert got == pytest.approx(call.logprobs, abs=1e-4), name  # the exported model is the served one
