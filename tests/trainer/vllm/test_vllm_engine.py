"""`--engine vllm` against a stand-in that speaks vLLM's HTTP API (tests/support/vllm_stub.py, launched in
vLLM's place): launch arguments, health failures, and the full-weights and sleep choreography. Real vLLM
runs these paths in tests/vllm_real/ (LoRA over two vLLM engines through a swarm there only: the stand-in's
version of that test was the same test, slower to fail)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ajet import AgentJetJob
from ajet_trainer.checkpoint import prune_step_folders
from ajet_trainer.errors import EngineStartError, TrainerError
from ajet_trainer.options import TrainerOptions
from ajet_trainer.tiny_model import builtin_model_path
from ajet_trainer.vllm.adapters import ServedAdapters
from ajet_trainer.vllm.engines import refuse_tied_full_reload
from ajet_trainer.vllm.launch import Launch
from ajet_trainer.vllm.server import (
    VllmServer,
    VllmSettings,
    find_vllm_python,
    launch_args,
    launch_env,
    server_devices,
)
from tests.support.episodes import play_batch
from tests.support.procs import STUB
from tests.support.swarm import running_swarm

STAND_IN = f"{sys.executable} {STUB} serve"


def test_vllm_launch_arguments_defaults_and_overrides():
    gpu = VllmSettings(
        python="/venv/bin/python",
        lora_rank=16,
        max_model_len=4096,
        gpu_memory_utilization=0.5,
        enable_sleep_mode=True,
        max_tokens_cap=512,
    )
    assert launch_args("/models/qwen", gpu, 8123) == [
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/qwen",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--served-model-name",
        "policy",
        "judge",  # a LoRA job's frozen base, served as the judge
        "--max-model-len",
        "4096",
        "--gpu-memory-utilization",
        "0.5",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--tool-strict-level",  # a forced call's arguments follow its tool's schema, as on the embedded engine
        "parameter",
        "--structured-outputs-config",  # JSON under a grammar without free blanks, as on the embedded engine
        '{"backend": "xgrammar", "disable_any_whitespace": true}',
        "--override-generation-config",  # the job's per-turn cap: vLLM cuts any request to it
        '{"max_new_tokens": 512}',
        "--enable-lora",
        "--max-lora-rank",
        "16",
        "--max-loras",  # the adapters kept loaded: the step before's and the new one's share a batch
        "2",
        "--enable-sleep-mode",
    ]
    cpu = VllmSettings(
        python="py",
        lora_rank=0,
        max_model_len=256,
        cpu=True,
        user_args=("--dtype=bfloat16", "--tool-call-parser", "qwen3_xml", "--seed", "1"),
    )
    args = launch_args("/m", cpu, 1)
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.15"  # a share of host RAM on CPU
    assert "--enforce-eager" in args and "--enable-lora" not in args  # full fine-tuning: no LoRA in vLLM
    assert "--no-enable-chunked-prefill" in args  # the CPU build's worker dies discarding a seeded chunk's sample
    assert args.count("--tool-call-parser") == 1 and "hermes" not in args  # a --vllm-arg replaces the default
    assert "float32" not in args and args[-5:] == ["--dtype=bfloat16", "--tool-call-parser", "qwen3_xml", "--seed", "1"]
    env = launch_env()
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True" and env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["VLLM_HOST_IP"] == "127.0.0.1"  # vLLM's internal queues stay on loopback
    stand_in = VllmSettings(command=("python", "stub.py", "serve"))
    assert launch_args("/m", stand_in, 2)[:5] == ["python", "stub.py", "serve", "--model", "/m"]


def test_vllm_python_is_found(tmp_path, monkeypatch):
    monkeypatch.delenv("AJET_VLLM_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TrainerError, match="no such interpreter"):
        find_vllm_python(str(tmp_path / "nope"))
    venv = tmp_path / ".venv-vllm" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("")
    assert find_vllm_python() == str(venv / "python")  # .venv-vllm of the working folder first
    monkeypatch.setenv("AJET_VLLM_PYTHON", sys.executable)  # the config system's variable for `vllm_python`
    assert find_vllm_python(TrainerOptions.from_config().vllm_python) == sys.executable


def test_prune_keeps_the_newest_step_folders(tmp_path):
    for n in (1, 2, 10):
        (tmp_path / f"step_{n}").mkdir()
    prune_step_folders(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_10", "step_2"]


def _without_tie_key(model, folder: Path) -> Path:
    """`model` saved with a config that does not say whether the embeddings are tied."""
    model.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    del config["tie_word_embeddings"]
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_full_fine_tuning_refuses_tied_embeddings(tmp_path):
    from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, Qwen3Config, Qwen3ForCausalLM

    small = dict(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=8,
    )
    with pytest.raises(TrainerError, match="ties its input and output embeddings"):
        refuse_tied_full_reload(Qwen3ForCausalLM(Qwen3Config(tie_word_embeddings=True, **small)), "tied")
    # a config that does not say gets its model class's default, as transformers (and vLLM) read it:
    gpt2 = _without_tie_key(
        GPT2LMHeadModel(GPT2Config(vocab_size=32, n_embd=16, n_layer=1, n_head=2)), tmp_path / "gpt2"
    )
    with pytest.raises(TrainerError, match="ties"):  # GPT-2's default: tied
        refuse_tied_full_reload(AutoModelForCausalLM.from_pretrained(gpt2), str(gpt2))
    qwen3 = _without_tie_key(Qwen3ForCausalLM(Qwen3Config(tie_word_embeddings=True, **small)), tmp_path / "qwen3")
    refuse_tied_full_reload(AutoModelForCausalLM.from_pretrained(qwen3), str(qwen3))  # Qwen3's default: untied
    refuse_tied_full_reload(AutoModelForCausalLM.from_pretrained(builtin_model_path("builtin:tiny")), "builtin:tiny")


def test_vllm_replica_gpu_groups():
    assert server_devices(2, None) == [None, None]
    assert server_devices(2, "0,1;2,3") == ["0,1", "2,3"]
    with pytest.raises(TrainerError, match="2 vLLM engines but 3 GPU groups"):
        server_devices(2, "0;1;2")


def test_vllm_start_failure_reports_the_log_tail(tmp_path):
    s = VllmSettings(
        command=(sys.executable, "-c", "print('RuntimeError: CUDA out of memory'); raise SystemExit(3)", "serve"),
        health_timeout_s=30,
    )
    with pytest.raises(EngineStartError, match="CUDA out of memory"):
        VllmServer("/models/none", s, tmp_path / "vllm.log").start()
    hang = VllmSettings(command=(sys.executable, "-c", "import time; time.sleep(60)", "serve"), health_timeout_s=1.5)
    with pytest.raises(EngineStartError, match="not healthy after"):
        VllmServer("/models/none", hang, tmp_path / "vllm2.log").start()


def test_sleep_mode_wraps_each_update(tmp_path):
    class Model:
        def save_pretrained(self, path):
            Path(path).mkdir(parents=True)
            (Path(path) / "adapter_config.json").write_text("{}")

    def stop() -> None:
        pass

    s = VllmSettings(command=tuple(STAND_IN.split()), lora_rank=8, enable_sleep_mode=True, health_timeout_s=60)
    model_path = str(builtin_model_path("builtin:tiny"))
    serving = ServedAdapters(
        Launch([VllmServer(model_path, s, tmp_path / "v.log")]), Model(), tmp_path, "default", 2, stop
    )
    try:
        with serving.updating(1):
            pass
        assert serving.publish(1) == "policy@default@1"
        journal = httpx.get(serving.launch.engines[0].base + "/stub/journal").json()
        assert [j["op"] for j in journal] == ["sleep", "wake_up", "load_lora_adapter"]
    finally:
        serving.stop()
        serving.launch.stop()


def _train_three_batches(sw, job: AgentJetJob) -> None:
    client = sw.client()
    client.auto_sync_train_config_and_start_engine(job)
    for batch in range(3):
        play_batch(client, batch)
        deadline = time.monotonic() + 120
        while client.get_engine_status().global_step < batch + 1:
            assert time.monotonic() < deadline, sw.logs()
            time.sleep(0.2)


JOB = dict(
    model="builtin:tiny",
    batch_size=2,
    num_repeat=2,
    lr=1e-2,
    max_prompt_length=64,
    max_response_length=64,
    max_model_len=256,
    max_response_length_in_one_turn=8,
)


@pytest.mark.slow
def test_vllm_full_fine_tuning_reloads_the_weights_each_step(tmp_path):
    with running_swarm(tmp_path, name="f", engine="vllm", trainer_args=("--vllm-command", STAND_IN)) as sw:
        _train_three_batches(sw, AgentJetJob(lora_rank=0, **JOB))
        deps = sw.store().engines()
        assert [(d.name, d.model, d.policy_version) for d in deps] == [("vllm-0", "policy", 3)]
        journal = httpx.get(deps[0].base_url.removesuffix("/v1") + "/stub/journal").json()
        control = [(j["op"], j.get("kwargs", {}).get("weights_path")) for j in journal if j["op"] != "chat"]
        weights = sw.exp_dir / "weights"
        assert control == [
            op
            for n in (1, 2, 3)
            for op in (("reload_weights", str(weights / f"step_{n}")), ("reset_prefix_cache", None))
        ]
        assert [p.name for p in weights.iterdir()] == ["step_3"]  # older folders pruned once vLLM read them
        assert (weights / "step_3" / "model.safetensors").is_file()


def test_a_vllm_engine_that_dies_while_rolling_is_relaunched(tmp_path):
    """Round three: a vLLM engine died under a waiting trainer, and every call was a 503 from then on. The trainer
    sees its engine exit while it waits for episodes, boots a new one (the last step's weights), and the run goes on."""
    import psutil

    from ajet.types import ExperimentState

    with running_swarm(tmp_path, name="d", engine="vllm", trainer_args=("--vllm-command", STAND_IN)) as sw:
        client, store = sw.client(), sw.store()
        _train_three_batches(sw, AgentJetJob(lora_rank=0, **{**JOB, "save_freq": 1}))
        (old,) = store.engines()
        port = int(old.base_url.rsplit(":", 1)[1].split("/")[0])
        (engine,) = [p for p in psutil.process_iter(["cmdline"]) if str(port) in " ".join(p.info["cmdline"] or [])]
        engine.kill()
        deadline = time.monotonic() + 120
        while not (store.engines() and store.engines()[0].base_url != old.base_url):
            assert time.monotonic() < deadline, sw.logs()
            time.sleep(0.2)
        assert "EngineLost" in (store.experiment().last_error or "") and "exited" in store.experiment().last_error
        while client.get_engine_status().state != ExperimentState.ROLLING:
            assert time.monotonic() < deadline, sw.logs()
            time.sleep(0.2)
        assert client.get_engine_status().policy_version == 3  # the new engine serves the last step's weights
        play_batch(client, 3)
        while client.get_engine_status().global_step < 4:
            assert time.monotonic() < deadline, sw.logs()
            time.sleep(0.2)


def _options(*argv: str):
    import argparse

    from ajet_trainer.cli import add_trainer_arguments, trainer_options

    p = argparse.ArgumentParser()
    add_trainer_arguments(p)
    return trainer_options(p.parse_args(list(argv)))


def test_partial_rollouts_run_on_vllm_but_not_beside_sleep_mode_or_verl():
    """vLLM keeps its running requests across a partial-rollouts update (`versioned_server.py` launched, one
    adapter name); sleep mode would drop them with their KV cache, and verl's engines have no such update: both
    refused in one line before any model loads."""
    from ajet_trainer.factory import refuse_unsupported_async
    from ajet_trainer.vllm.engines import vllm_settings
    from ajet_trainer.vllm.server import VERSIONED_SERVER

    job = AgentJetJob(partial_rollouts=True)
    on_vllm = _options("--engine", "vllm", "--backend", "embedded")
    refuse_unsupported_async(job, on_vllm)  # allowed
    settings = vllm_settings(on_vllm, job, cpu=True)
    assert settings.partial_rollouts and launch_args("/m", settings, 1)[1] == str(VERSIONED_SERVER)
    assert VERSIONED_SERVER.is_file()
    with pytest.raises(TrainerError, match="sleep mode would drop with their KV cache: leave out --vllm-sleep"):
        vllm_settings(_options("--engine", "vllm", "--vllm-sleep"), job, cpu=False)
    with pytest.raises(TrainerError, match="partial_rollouts runs on the embedded backend"):
        refuse_unsupported_async(job, _options("--engine", "vllm", "--backend", "verl"))
    refuse_unsupported_async(AgentJetJob(partial_rollouts=True, max_staleness=1), on_vllm)  # in place, as above
    with pytest.raises(TrainerError, match="max_staleness=1 serves calls while the trainer updates, which sleep mode"):
        vllm_settings(_options("--engine", "vllm", "--vllm-sleep"), AgentJetJob(max_staleness=1, lora_rank=8), False)
    assert launch_args("/m", vllm_settings(on_vllm, AgentJetJob(), cpu=True), 1)[1:3] == list(
        ("-m", "vllm.entrypoints.openai.api_server")
    )


@pytest.mark.slow
def test_partial_rollouts_update_vllm_in_place_across_a_pause_that_keeps_requests(tmp_path):
    """The trainer's side of partial rollouts on vLLM: the starting adapter and each step's loaded under one name,
    in place, between a pause that keeps the running requests and a resume, the KV cache dropped (the running
    requests' too: vLLM computes them again under the new weights) and the tokens to come labelled the version."""
    with running_swarm(tmp_path, name="p", engine="vllm", trainer_args=("--vllm-command", STAND_IN)) as sw:
        _train_three_batches(sw, AgentJetJob(lora_rank=8, partial_rollouts=True, **JOB))
        deps = sw.store().engines()
        assert [(d.name, d.model, d.policy_version) for d in deps] == [("vllm-0", "policy@live", 3)]
        journal = httpx.get(deps[0].base_url.removesuffix("/v1") + "/stub/journal").json()
        control = [j for j in journal if j["op"] != "chat"]
        adapters = sw.exp_dir / "adapters"
        assert control == [
            op
            for n in (0, 1, 2, 3)
            for op in (
                {"op": "pause", "mode": "keep"},
                {"op": "load_lora_adapter", "name": "policy@live", "path": str(adapters / f"step_{n}")},
                {"op": "reset_prefix_cache", "reset_running_requests": "true"},
                {"op": "update_weight_version", "new_version": str(n)},
                {"op": "resume"},
            )
        ]
        assert {j["model"] for j in journal if j["op"] == "chat"} == {"policy@live"}
        assert [p.name for p in adapters.iterdir()] == ["step_3"]


def test_the_lora_rank_vllm_boots_with_is_one_it_takes():
    """vLLM takes only 1, 8, 16, 32, 64, 128, 256, 320 or 512 as --max-lora-rank: lora_rank=12 used to pass 12, and
    vLLM refused to boot."""
    from ajet_trainer.vllm.server import vllm_lora_rank

    assert [vllm_lora_rank(r) for r in (1, 2, 8, 12, 16, 17, 300, 320, 500)] == [1, 8, 8, 16, 16, 32, 320, 320, 512]
    with pytest.raises(TrainerError, match="above vLLM's largest"):
        vllm_lora_rank(513)
    args = launch_args("/m", VllmSettings(lora_rank=12), 1)
    assert args[args.index("--max-lora-rank") + 1] == "16"


LEAVE_A_SERVER = """
import sys, time
from pathlib import Path
from ajet_trainer.vllm.server import VllmServer, VllmSettings
settings = VllmSettings(command=tuple(sys.argv[1].split()), health_timeout_s=60)
VllmServer(sys.argv[2], settings, Path(sys.argv[3]) / "vllm-0.log").start()
print("up", flush=True)
time.sleep(600)
"""


def test_a_vllm_server_a_killed_trainer_left_running_is_ended_at_the_next_start(tmp_path):
    """A trainer SIGKILLed mid-run never stops the vLLM server it launched (on a GPU the new one would not fit
    beside it): the next start of the experiment ends it, found by the pid and command kept beside its log; a pid
    file whose process runs something else now, or a server of this trainer's own, is left alone."""
    import subprocess

    from ajet_trainer.left_servers import end_left_servers

    model_path = str(builtin_model_path("builtin:tiny"))
    trainer = subprocess.Popen([sys.executable, "-c", LEAVE_A_SERVER, STAND_IN, model_path, str(tmp_path)],
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert trainer.stdout is not None and trainer.stdout.readline() == "up\n"
    trainer.kill()  # SIGKILL: its server runs on, orphaned
    trainer.wait(10)
    left = json.loads((tmp_path / "vllm-0.pid").read_text())
    assert Path(f"/proc/{left['pid']}/cmdline").read_bytes().split(b"\0")[:-1] == [c.encode() for c in left["cmd"]]
    assert Path(left["ipc_dir"]).is_dir()  # the folder of its IPC sockets, named in its record
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # a live pid, another command
    own = VllmServer(
        model_path, VllmSettings(command=tuple(STAND_IN.split()), health_timeout_s=60), tmp_path / "vllm-1.log"
    )
    try:
        own.start()  # this trainer's own server: left alone
        (tmp_path / "vllm-2.pid").write_text(json.dumps({"pid": other.pid, "cmd": ["vllm", "serve"]}))
        end_left_servers(tmp_path)
        deadline = time.monotonic() + 60
        while Path(f"/proc/{left['pid']}/cmdline").exists() and Path(f"/proc/{left['pid']}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "the left server still runs"
            time.sleep(0.2)
        assert other.poll() is None and own.proc is not None and own.proc.poll() is None
        assert httpx.get(own.base + "/health").status_code == 200
        assert not (tmp_path / "vllm-0.pid").exists() and not (tmp_path / "vllm-2.pid").exists()
        assert (tmp_path / "vllm-1.pid").exists()  # the record of this trainer's own server stays
        assert not Path(left["ipc_dir"]).exists() and own.ipc_dir is not None and own.ipc_dir.is_dir()
    finally:
        other.kill()
        own.stop()
    assert not (tmp_path / "vllm-1.pid").exists()  # a stopped server's record goes with it
    assert own.ipc_dir is not None and not own.ipc_dir.exists()  # and the folder of its IPC sockets


def test_a_server_any_killed_trainer_left_is_ended_by_the_next_trainer_of_any_experiment(tmp_path, monkeypatch):
    """The machine's record folder names each server's trainer: a later trainer's start, whatever its experiment,
    ends the servers whose trainer is gone (`end_orphaned_servers`), and leaves a live trainer's alone."""
    from ajet_trainer.left_servers import end_orphaned_servers

    records = tmp_path / "records"
    monkeypatch.setenv("AJET_SERVER_RECORDS", str(records))
    model_path, folder = str(builtin_model_path("builtin:tiny")), tmp_path / "experiment-a"
    folder.mkdir()
    trainer = subprocess.Popen([sys.executable, "-c", LEAVE_A_SERVER, STAND_IN, model_path, str(folder)],
                               stdout=subprocess.PIPE, text=True, env={**os.environ})  # fmt: skip
    assert trainer.stdout is not None and trainer.stdout.readline() == "up\n"
    trainer.kill()
    trainer.wait(10)
    record = json.loads((folder / "vllm-0.pid").read_text())
    left, ipc = record["pid"], Path(record["ipc_dir"])
    own = VllmServer(
        model_path, VllmSettings(command=tuple(STAND_IN.split()), health_timeout_s=60), tmp_path / "b" / "vllm-0.log"
    )
    try:
        own.start()  # a server of a live trainer (this process)
        assert sorted(p.name for p in records.iterdir()) == sorted([f"{left}.json", f"{own.proc.pid}.json"])
        assert ipc.is_dir() and end_orphaned_servers() == 1
        assert not Path(f"/proc/{left}/cmdline").exists() or not Path(f"/proc/{left}/cmdline").read_bytes()
        assert not ipc.exists()  # the orphan's IPC sockets went with it
        assert [p.name for p in records.iterdir()] == [f"{own.proc.pid}.json"] and own.proc.poll() is None
    finally:
        own.stop()
    assert list(records.iterdir()) == []  # a server stopped cleanly drops its record
