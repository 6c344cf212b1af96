"""Checkpoints: full and LoRA round trips, the `latest` pointer, pruning, partial writes ignored."""

import shutil
from pathlib import Path

import pytest
import torch

from ajet.job import AgentJetJob
from ajet_trainer.checkpoint import latest_checkpoint, load_checkpoint, prune_checkpoints, save_checkpoint
from ajet_trainer.embedded.learner import Learner
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path
from ajet_trainer.types import EpisodeSample, TrainSequence

SAMPLES = [
    EpisodeSample(u, "t", r, (TrainSequence(u, "t", (5, 6), (40 + i, 41), (1, 1), (0.0, 0.0)),))
    for i, (u, r) in enumerate([("a", 1.0), ("b", 0.0)])
]


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def _round_trip(tmp_path, job):
    path = str(builtin_model_path("builtin:tiny"))
    model, tok = load_policy(path, job, "cpu")
    learner = Learner(model, tok, job)
    learner.update(SAMPLES)
    saved = save_checkpoint(tmp_path, 1, model, tok, learner.optimizer, job.lora_rank > 0, {"policy_version": 1})
    trained = _state(model)
    fresh, _ = load_policy(path, job, "cpu")
    fresh_learner = Learner(fresh, tok, job)
    assert any(not torch.equal(trained[k], v) for k, v in fresh.state_dict().items())
    state = load_checkpoint(latest_checkpoint(tmp_path), fresh, fresh_learner.optimizer)
    assert state["step"] == 1 and state["policy_version"] == 1
    for k, v in fresh.state_dict().items():
        assert torch.equal(trained[k], v), k
    assert fresh_learner.optimizer.state_dict()["state"].keys() == learner.optimizer.state_dict()["state"].keys()
    return saved


def test_full_round_trip(tmp_path):
    saved = _round_trip(tmp_path, AgentJetJob(lr=1e-2))
    assert (saved / "model" / "model.safetensors").is_file() and (saved / "optimizer.pt").is_file()
    for name in ("config.json", "generation_config.json", "tokenizer_config.json"):  # a model folder, loadable
        assert (saved / "model" / name).is_file(), name


def test_lora_round_trip_saves_only_the_adapter(tmp_path):
    saved = _round_trip(tmp_path, AgentJetJob(lr=1e-2, lora_rank=4, lora_alpha=8))
    adapter = saved / "adapter" / "adapter_model.safetensors"
    assert adapter.is_file() and (saved / "adapter" / "adapter_config.json").is_file()
    assert not (saved / "model").exists() and adapter.stat().st_size < 200_000


def test_latest_pointer_partial_writes_and_pruning(tmp_path):
    job = AgentJetJob()
    model, tok = load_policy(str(builtin_model_path("builtin:tiny")), job, "cpu")
    opt = Learner(model, tok, job).optimizer
    assert latest_checkpoint(tmp_path) is None
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, step, model, tok, opt, False, {})
    (tmp_path / "checkpoints" / ".step_5.tmp").mkdir()  # a crash mid-write leaves only a temp folder
    assert latest_checkpoint(tmp_path).name == "step_4"
    prune_checkpoints(tmp_path, keep=2)
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == ["step_3", "step_4"]
    assert latest_checkpoint(tmp_path).name == "step_4"


def test_checkpoints_of_the_earlier_layout_still_restore(tmp_path):
    saved = _round_trip(tmp_path, AgentJetJob(lr=1e-2))  # then rewrite it as the earlier layout had it
    (saved / "model" / "model.safetensors").rename(saved / "model.safetensors")
    shutil.rmtree(saved / "model")
    job = AgentJetJob(lr=1e-2)
    fresh, tok = load_policy(str(builtin_model_path("builtin:tiny")), job, "cpu")
    assert load_checkpoint(saved, fresh, Learner(fresh, tok, job).optimizer)["step"] == 1


def test_export_of_an_earlier_layout_checkpoint_is_a_clear_error(tmp_path):
    import pytest

    from ajet_trainer.errors import CheckpointError
    from ajet_trainer.model_export import export_model

    saved = _round_trip(tmp_path, AgentJetJob(lr=1e-2, lora_rank=4, lora_alpha=8))
    (saved / "adapter" / "adapter_model.safetensors").rename(saved / "adapter.safetensors")  # the earlier layout
    shutil.rmtree(saved / "adapter")
    with pytest.raises(CheckpointError, match="before checkpoints were model folders"):
        export_model(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_export_model_finds_an_experiment_of_the_swarm_by_its_name(tmp_path):
    """`ajet-trainer export-model --experiment-dir D --experiment NAME`: D when its job.yaml names NAME (the swarm's
    default experiment), else `D.exp-<slug>` as the trainer lays it out; a name under neither is one line, exit 1."""
    import subprocess
    import sys

    from ajet import AgentJetJob
    from ajet_store.placement import experiment_slug
    from ajet_trainer.errors import CheckpointError
    from ajet_trainer.experiment_dir import experiment_folder, folder_of_experiment, write_job_yaml

    base = tmp_path / "exp"
    beside = Path(str(experiment_folder(str(base), experiment_slug("p/b"))))
    for folder, name in ((base, "a"), (beside, "b")):
        folder.mkdir()
        write_job_yaml(AgentJetJob(project_name="p", experiment_name=name), folder / "job.yaml")
    assert folder_of_experiment(base, "p/a") == base and folder_of_experiment(base, "p/b") == beside
    with pytest.raises(CheckpointError, match="no experiment p/c under"):
        folder_of_experiment(base, "p/c")
    res = subprocess.run(
        [sys.executable, "-m", "ajet_trainer.cli", "export-model", "--experiment-dir", str(base), "--experiment",
         "p/c", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 1 and "no experiment p/c under" in res.stderr and "Traceback" not in res.stderr


def _evaluation(i: int, name: str, score: float, versions: tuple[int, int]):
    from ajet.evaluation_types import EvaluationInfo

    lo, hi = versions
    return EvaluationInfo(id=i, name=name, k=1, tasks=2, episodes=2, mean_reward=score, pass_at_k=score,
                          version_min=lo, version_max=hi, global_step=hi, created_at=0.0)  # fmt: skip


def test_the_best_evaluated_versions_of_each_task_set_are_kept_and_exported(tmp_path, caplog):
    from ajet_trainer.checkpoint import evaluated_steps, prune_step_folders
    from ajet_trainer.errors import CheckpointError
    from ajet_trainer.model_export import best_evaluated

    evals = [_evaluation(1, "a", 0.9, (1, 1)), _evaluation(2, "a", 0.5, (2, 2)), _evaluation(3, "a", 1.0, (3, 4)),
             _evaluation(4, "b", 0.2, (5, 5)), _evaluation(5, "b", 0.1, (6, 6))]  # fmt: skip
    assert evaluated_steps(evals, 1) == {1, 5}  # one served by two versions never counts
    assert evaluated_steps(evals, 2) == {1, 2, 5, 6} and evaluated_steps(evals, 0) == set()
    for n in range(1, 9):
        (tmp_path / f"step_{n}").mkdir()
    prune_step_folders(tmp_path, 2, protect={1, 5})
    assert sorted(int(p.name[5:]) for p in tmp_path.iterdir()) == [1, 5, 7, 8]
    assert best_evaluated(evals, {1, 2}, "a").version_min == 1
    with caplog.at_level("WARNING"):
        assert best_evaluated(evals, {2}, "a").version_min == 2  # the best has no checkpoint: the next best, said
    assert "the best evaluation of 'a' (version 1, pass@1 0.900) has no checkpoint on disk" in caplog.text
    with pytest.raises(CheckpointError, match="no evaluated version of 'a' has a checkpoint on disk"):
        best_evaluated(evals, {7}, "a")
    with pytest.raises(CheckpointError, match="no evaluation of 'c'"):
        best_evaluated(evals, {1}, "c")
