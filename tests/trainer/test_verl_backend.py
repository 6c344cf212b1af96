"""The verl backend on CPU: config composition, DataProto from the store, the store-fed trainer step."""

import numpy as np
import pytest
import torch
import yaml
from verl.trainer.ppo import core_algos

from ajet import AgentJetJob
from ajet.types import BatchMode, EngineState
from ajet_proxy.batch_policy import select_batch
from ajet_proxy.store import Store, sqlite_url
from ajet_proxy.types import CallRecord
from ajet_trainer.grpo import collate, episode_advantages
from ajet_trainer.samples import assemble, flatten
from ajet_trainer.verl_backend.config import compose_verl_config
from ajet_trainer.verl_backend.dataproto import samples_to_dataproto
from ajet_trainer.verl_backend.trainer import StoreFedTrainer


def test_verl_config_composition(tmp_path):
    user = tmp_path / "over.yaml"
    user.write_text("actor_rollout_ref.rollout.tensor_model_parallel_size: 2\ntrainer.total_epochs: 3\n")
    job = AgentJetJob(batch_size=16, num_repeat=8, lr=3e-6, lora_rank=32, lora_alpha=64, n_gpu=4, ppo_epochs=2,
                      mini_batch_num=4, use_kl_loss=True, kl_loss_coef=0.01, max_prompt_length=1024,
                      max_response_length=2048, max_model_len=4096)
    cfg = compose_verl_config(job, user, nnodes=2, model_path="/models/qwen")
    a = cfg.actor_rollout_ref
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.data.train_batch_size == 16
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (1024, 2048)
    assert a.rollout.n == 8 and a.model.path == "/models/qwen" and a.actor.optim.lr == 3e-6
    assert (a.model.lora_rank, a.model.lora_alpha, a.model.target_modules) == (32, 64, "all-linear")
    assert a.rollout.load_format == "safetensors" and a.rollout.layered_summon is True
    assert (a.actor.ppo_epochs, a.actor.ppo_mini_batch_size) == (2, 4)
    assert a.actor.use_kl_loss is True and a.actor.kl_loss_coef == 0.01
    assert (cfg.trainer.n_gpus_per_node, cfg.trainer.nnodes, cfg.trainer.total_epochs) == (4, 2, 3)
    assert a.rollout.tensor_model_parallel_size == 2  # the user's file wins
    dumped = yaml.safe_load(job.dump_job_as_yaml(tmp_path / "job.yaml").read_text())
    assert dumped["verl"]["actor_rollout_ref.rollout.n"] == 8 and AgentJetJob.from_yaml(tmp_path / "job.yaml") == job


@pytest.fixture
def store(tmp_path):
    st = Store(sqlite_url(tmp_path / "verl.db"))
    st.sync_job({"batch_size": 2, "num_repeat": 3})
    st.transition(EngineState.ROLLING)
    rewards = {"t1": [1.0, 0.0, 0.5], "t2": [0.2, 0.2, 0.9]}
    for task, rs in rewards.items():
        for i, r in enumerate(rs):
            uuid = f"{task}-{i}"
            st.begin_episode(uuid, uuid, "c", "train", 60)
            prompt = [1, 2, 3] if task == "t1" else [4, 5]
            st.write_calls([CallRecord(uuid, 0, "{}", "{}", prompt, [10 + i] * (i + 1), [-0.1] * (i + 1), "stop", 0,
                                       "d", 1.0, 1.0)])
            st.end_episode(uuid, "c", task, r, None, {})
    return st


def _samples(st, job):
    batch = select_batch(st.pool_episodes(), BatchMode.TASKS, job.batch_size, job.num_repeat)
    return assemble([(p.uuid, p.task_id, p.reward, st.calls(p.uuid)) for p in batch], 64, 64)[0]


def test_verl_dataproto_equals_the_embedded_samples_and_advantages(store):
    job = AgentJetJob(batch_size=2, num_repeat=3)
    samples = _samples(store, job)
    dp = samples_to_dataproto(samples, pad_id=0)
    ref = collate(flatten(samples), 0)
    for key, want in (("input_ids", ref.input_ids), ("attention_mask", ref.attention_mask),
                      ("position_ids", ref.position_ids), ("responses", ref.responses),
                      ("response_mask", ref.response_mask), ("rollout_log_probs", ref.rollout_logprobs)):
        assert torch.equal(dp.batch[key], want), key
    assert torch.equal(dp.batch["prompts"], ref.input_ids[:, :ref.prompt_width])
    # the reward sits on the last valid response token
    lengths = ref.response_mask.sum(-1).long()
    for i, ep in enumerate(samples):
        assert dp.batch["token_level_rewards"][i, lengths[i] - 1] == ep.reward
        assert dp.batch["token_level_rewards"][i].sum() == ep.reward
    assert list(dp.non_tensor_batch["uid"]) == [s.task_id for s in samples]
    adv, _ = core_algos.compute_grpo_outcome_advantage(dp.batch["token_level_rewards"], dp.batch["response_mask"],
                                                       dp.non_tensor_batch["uid"])
    ours = episode_advantages(samples)
    for i, ep in enumerate(samples):
        assert float(adv[i, 0]) == pytest.approx(ours[ep.episode_uuid], abs=1e-5)
    assert np.isfinite(adv.numpy()).all()


def test_verl_store_fed_trainer_step_returns_the_batch(store):
    job = AgentJetJob(batch_size=2, num_repeat=3)
    trainer = StoreFedTrainer.__new__(StoreFedTrainer)  # verl's __init__ needs Ray workers; the step does not
    trainer.attach_store(store, job, pad_id=0, poll_s=0.05)
    dp = trainer._fit_generate()
    assert len(dp) == 6 and sorted(trainer.ajet_batch_uuids) == sorted(p.uuid for p in store.pool_episodes())
    assert set(dp.non_tensor_batch["uid"]) == {"t1", "t2"}
    empty = StoreFedTrainer.__new__(StoreFedTrainer)
    empty.attach_store(store, AgentJetJob(batch_size=3, num_repeat=3), pad_id=0, poll_s=0.05)
    with pytest.raises(TimeoutError):
        empty.store_batch(timeout=0.3)
