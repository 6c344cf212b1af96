"""The verl backend on CPU: config composition, DataProto from the store, the store-fed trainer step."""

import copy

import numpy as np
import pytest
import torch
import yaml
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.utils import Role
from verl.utils.config import omega_conf_to_dataclass

from ajet import AgentJetJob
from ajet.evaluation_types import Summary
from ajet.types import BatchMode, ExperimentState
from ajet_store import Store, sqlite_url
from ajet_store.batch_policy import select_batch
from ajet_store.types import CallRecord
from ajet_trainer.errors import ConfigurationError, TrainerError
from ajet_trainer.experiment_dir import write_job_yaml
from ajet_trainer.factory import open_session
from ajet_trainer.grpo import collate, episode_advantages
from ajet_trainer.options import TrainerOptions
from ajet_trainer.samples import assemble, flatten
from ajet_trainer.step_record import reconcile_store
from ajet_trainer.tiny_model import builtin_model_path
from ajet_trainer.types import SessionPlace
from ajet_trainer.verl.config import compose_verl_config, cpu_ranks, fit_job_to_cpus, job_overrides
from ajet_trainer.verl.dataproto import samples_to_dataproto
from ajet_trainer.verl.launch import build_trainer, start_local_ray, validate
from ajet_trainer.verl.session import VerlSession, session_overrides
from tests.support.verl_stand_in import CpuActorGroup, ReplicaJournal


def test_verl_config_composition(tmp_path):
    user = tmp_path / "over.yaml"
    user.write_text("actor_rollout_ref.rollout.tensor_model_parallel_size: 2\ntrainer.total_epochs: 3\n")
    job = AgentJetJob(
        batch_size=16,
        num_repeat=8,
        lr=3e-6,
        lora_rank=32,
        lora_alpha=64,
        n_gpu=4,
        ppo_epochs=2,
        mini_batch_num=4,
        use_kl_loss=True,
        kl_loss_coef=0.01,
        max_prompt_length=1024,
        max_response_length=2048,
        max_model_len=4096,
        clip_ratio_high=0.28,
        entropy_coeff=0.01,
    )
    cfg = compose_verl_config(job, user, nnodes=2, model_path="/models/qwen")
    a = cfg.actor_rollout_ref
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.data.train_batch_size == 16
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (1024, 2048)
    assert a.rollout.n == 8 and a.model.path == "/models/qwen" and a.actor.optim.lr == 3e-6
    assert (a.model.lora_rank, a.model.lora_alpha, a.model.target_modules) == (32, 64, "all-linear")
    assert a.rollout.load_format == "safetensors" and a.rollout.layered_summon is True
    assert (a.actor.ppo_epochs, a.actor.ppo_mini_batch_size) == (2, 4)
    assert a.actor.use_kl_loss is True and a.actor.kl_loss_coef == 0.01
    assert (a.actor.clip_ratio, a.actor.clip_ratio_high, a.actor.entropy_coeff) == (0.2, 0.28, 0.01)
    assert (cfg.trainer.n_gpus_per_node, cfg.trainer.nnodes, cfg.trainer.total_epochs) == (4, 2, 3)
    assert a.rollout.tensor_model_parallel_size == 2  # the user's file wins
    dumped = yaml.safe_load(write_job_yaml(job, tmp_path / "job.yaml", resolved=job_overrides(job)).read_text())
    assert dumped["verl_resolved"]["actor_rollout_ref.rollout.n"] == 8 and dumped["verl"] == {}
    assert AgentJetJob.from_yaml(tmp_path / "job.yaml") == job  # the resolved keys are for reference only


def test_a_verl_key_edited_in_the_job_yaml_reaches_verls_resolved_config(tmp_path):
    path = AgentJetJob(batch_size=4, num_repeat=2).dump_job_as_yaml(tmp_path / "job.yaml")
    data = yaml.safe_load(path.read_text())
    data["verl"] = {
        "actor_rollout_ref": {"rollout": {"tensor_model_parallel_size": 2}},
        "actor_rollout_ref.actor.optim.lr": 7e-7,
        "trainer.total_epochs": 5,
    }
    data["ajet"]["lr"] = 1e-3  # the job's own lr loses to the verl section's, which is more specific
    path.write_text(yaml.safe_dump(data))
    job = AgentJetJob().build_job_from_yaml(path)
    assert job.verl == {
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
        "actor_rollout_ref.actor.optim.lr": 7e-7,
        "trainer.total_epochs": 5,
    }
    user = tmp_path / "server.yaml"
    user.write_text("trainer.total_epochs: 3\n")  # the server's file: the job's verl section wins over it
    cfg = compose_verl_config(job, user)
    a = cfg.actor_rollout_ref
    assert (a.rollout.tensor_model_parallel_size, a.actor.optim.lr, cfg.trainer.total_epochs) == (2, 7e-7, 5)
    assert cfg.data.train_batch_size == 4  # and the job's other fields still reach verl
    assert AgentJetJob.from_yaml(job.dump_job_as_yaml(tmp_path / "again.yaml")) == job  # round trip


def test_an_unknown_verl_key_names_its_nearest_spelling():
    with pytest.raises(
        ConfigurationError,
        match=r"'actor_rollout_ref.actor.optim.lrr'.*did you mean "
        r"'actor_rollout_ref.actor.optim.lr'",
    ):
        compose_verl_config(AgentJetJob(verl={"actor_rollout_ref.actor.optim.lrr": 0.1}))


@pytest.mark.parametrize(
    "job",
    [
        AgentJetJob(lora_rank=8, batch_size=4, num_repeat=4),
        AgentJetJob(batch_size=4, num_repeat=4, use_kl_loss=True),
        AgentJetJob(
            n_gpu=8,
            batch_size=32,
            num_repeat=8,
            mini_batch_num=4,
            max_prompt_length=4096,
            max_response_length=20000,
            max_model_len=24576,
        ),
    ],
    ids=["lora", "full-kl", "8gpu-long"],
)
def test_verl_composed_config_passes_verls_own_validation(job, tmp_path):
    cfg = compose_verl_config(
        job, extra=session_overrides(job, tmp_path), model_path=str(builtin_model_path("builtin:tiny"))
    )
    OmegaConf.resolve(cfg)
    validate(cfg)  # raises TrainerError with verl's message otherwise
    for key in ("model", "actor", "rollout", "rollout.checkpoint_engine"):  # what verl's workers build from it
        omega_conf_to_dataclass(OmegaConf.select(cfg.actor_rollout_ref, key))
    a = cfg.actor_rollout_ref
    assert a.actor.use_dynamic_bsz and a.ref.log_prob_use_dynamic_bsz
    assert a.actor.ppo_max_token_len_per_gpu >= job.max_prompt_length + job.max_response_length
    assert a.actor.ppo_max_token_len_per_gpu >= job.micro_batch_tokens  # the job's micro-batches, verl's way
    assert cfg.critic.enable is False and a.model.lora.merge is (job.lora_rank > 0)


def test_verl_tracks_with_the_jobs_loggers(tmp_path):
    for logging, expected in ((["jsonl"], []), (["jsonl", "tensorboard", "wandb"], ["tensorboard", "wandb"])):
        job = AgentJetJob(logging=logging)
        cfg = compose_verl_config(job, extra=session_overrides(job, tmp_path), model_path="/models/m")
        assert list(cfg.trainer.logger) == expected  # verl's Tracking runs them; jsonl is ours


def test_verl_validation_reports_verls_reason(tmp_path):
    job = AgentJetJob(n_gpu=3, batch_size=2, num_repeat=1)  # 2 rows cannot be split over 3 GPUs
    cfg = compose_verl_config(job, extra=session_overrides(job, tmp_path), model_path="/models/m")
    with pytest.raises(TrainerError, match="verl rejects the composed config"):
        validate(cfg)


@pytest.mark.parametrize("lora_rank", [0, 8])
def test_verl_trainer_roles_for_kl_with_and_without_lora(lora_rank, tiny, tmp_path):
    job = AgentJetJob(n_gpu=1, batch_size=2, num_repeat=2, use_kl_loss=True, lora_rank=lora_rank)
    cfg = compose_verl_config(
        job, extra=session_overrides(job, tmp_path), model_path=str(builtin_model_path("builtin:tiny"))
    )
    trainer = build_trainer(cfg, tiny[1])
    assert trainer.use_reference_policy and trainer.ref_in_actor is (lora_rank > 0)
    # full fine-tuning: a frozen reference model of its own; LoRA: the actor without its adapter
    assert (Role.RefPolicy in trainer.role_worker_mapping) is (lora_rank == 0)
    trainer.resource_pool_to_cls = {}
    if lora_rank:
        trainer._create_reference_policy_class()  # no reference workers to place
        assert trainer.resource_pool_to_cls == {}


@pytest.fixture
def store(tmp_path):
    st = Store(sqlite_url(tmp_path / "verl.db"))
    st.sync_job(AgentJetJob(batch_size=2, num_repeat=3))
    st.transition(ExperimentState.ROLLING)
    rewards = {"t1": [1.0, 0.0, 0.5], "t2": [0.2, 0.2, 0.9]}
    for task, rs in rewards.items():
        for i, r in enumerate(rs):
            uuid = f"{task}-{i}"
            st.begin_episode(uuid, uuid, "c", "train", 60)
            prompt = [1, 2, 3] if task == "t1" else [4, 5]
            st.write_calls(
                [
                    CallRecord(
                        uuid, 0, "{}", "{}", prompt, [10 + i] * (i + 1), [-0.1] * (i + 1), "stop", 0, "d", 1.0, 1.0
                    )
                ]
            )
            st.end_episode(uuid, "c", task, r, None, {})
    yield st
    st.close()


def _samples(st, job):
    batch = select_batch(st.pool_episodes(), BatchMode.TASKS, job.batch_size, job.num_repeat)
    return assemble(st.rewarded_episodes(batch), 64, 64)[0]


def test_verl_dataproto_equals_the_embedded_samples_and_advantages(store):
    job = AgentJetJob(batch_size=2, num_repeat=3)
    samples = _samples(store, job)
    dp = samples_to_dataproto(samples, pad_id=0)
    ref = collate(flatten(samples), 0)
    for key, want in (
        ("input_ids", ref.input_ids),
        ("attention_mask", ref.attention_mask),
        ("position_ids", ref.position_ids),
        ("responses", ref.responses),
        ("response_mask", ref.response_mask),
        ("rollout_log_probs", ref.rollout_logprobs),
    ):
        assert torch.equal(dp.batch[key], want), key
    assert torch.equal(dp.batch["prompts"], ref.input_ids[:, : ref.prompt_width])
    # the reward sits on the last valid response token
    lengths = ref.response_mask.sum(-1).long()
    for i, ep in enumerate(samples):
        assert dp.batch["token_level_rewards"][i, lengths[i] - 1] == ep.reward
        assert dp.batch["token_level_rewards"][i].sum() == ep.reward
    assert list(dp.non_tensor_batch["uid"]) == [s.task_id for s in samples]
    adv, _ = core_algos.compute_grpo_outcome_advantage(
        dp.batch["token_level_rewards"], dp.batch["response_mask"], dp.non_tensor_batch["uid"]
    )
    ours = episode_advantages(samples)
    for i, ep in enumerate(samples):
        assert float(adv[i, 0]) == pytest.approx(ours[ep.episode_uuid], abs=1e-5)
    assert np.isfinite(adv.numpy()).all()


@pytest.fixture
def verl_trainer(tmp_path, tiny):
    """A real StoreFedTrainer (verl's config, verl's driver code) with the GPU parts stood in for."""
    job = AgentJetJob(n_gpu=1, batch_size=2, num_repeat=3, save_freq=1, lr=1e-3)
    path = str(builtin_model_path("builtin:tiny"))
    config = compose_verl_config(job, extra=session_overrides(job, tmp_path / "exp"), model_path=path)
    trainer = build_trainer(config, tiny[1])
    model = copy.deepcopy(tiny[0])
    trainer.actor_rollout_wg = CpuActorGroup(model)
    trainer.checkpoint_manager = trainer.llm_server_manager = ReplicaJournal(["10.0.0.5:8000", "10.0.0.6:8000"])
    return trainer, job, model


def test_verl_store_fed_trainer_step_returns_the_batch(store, verl_trainer):
    trainer, job, _ = verl_trainer
    trainer.attach_store(store, job, pad_id=0)
    trainer.metrics = {}
    pool = select_batch(store.pool_episodes(), BatchMode.TASKS, job.batch_size, job.num_repeat)
    trainer.ajet_next = trainer.store_batch(pool)  # what `train_on` hands over
    dp = trainer._fit_generate()  # the generation step: the store's episodes, not an agent loop
    assert len(dp) == 6 and sorted(dp.non_tensor_batch["episode_uuid"]) == sorted(p.uuid for p in pool)
    assert set(dp.non_tensor_batch["uid"]) == {"t1", "t2"}
    assert torch.equal(dp.batch["rm_scores"], dp.batch["token_level_scores"])
    assert trainer.checkpoint_manager.calls == ["sleep"]  # colocated vLLM engines give the GPUs to the update
    with pytest.raises(TrainerError, match="train_on"):
        trainer._fit_generate()  # nothing handed over


@pytest.fixture
def multi_store(tmp_path):
    """Two tasks x 3 episodes; episode t1-0 has two calls that do not extend each other (two sequences)."""
    st = Store(sqlite_url(tmp_path / "multi.db"))
    st.sync_job(AgentJetJob(batch_size=2, num_repeat=3))
    st.transition(ExperimentState.ROLLING)
    for task, rs in {"t1": [1.0, 0.0, 0.5], "t2": [0.2, 0.2, 0.9]}.items():
        for i, r in enumerate(rs):
            uuid = f"{task}-{i}"
            st.begin_episode(uuid, uuid, "c", "train", 60)
            prompt = [1, 2, 3] if task == "t1" else [4, 5]
            calls = [
                CallRecord(uuid, 0, "{}", "{}", prompt, [10 + i] * (i + 2), [-0.1] * (i + 2), "stop", 0, "d", 1.0, 1.0)
            ]
            if uuid == "t1-0":  # a second turn whose prompt was rewritten: a second sequence
                calls.append(
                    CallRecord(uuid, 1, "{}", "{}", [7, 8], [20, 21, 22], [-0.2] * 3, "stop", 0, "d", 1.0, 1.0)
                )
            st.write_calls(calls)
            st.end_episode(uuid, "c", task, r, None, {})
    yield st
    st.close()


def test_verl_fit_step_runs_verls_driver_on_store_episodes(multi_store, verl_trainer, tmp_path):
    trainer, job, model = verl_trainer
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer.attach_store(multi_store, job, pad_id=0)
    assert trainer.begin() == 0  # nothing to restore; weights pushed into the (stand-in) vLLM engines
    batch = select_batch(multi_store.pool_episodes(), BatchMode.TASKS, 2, 3)
    metrics = trainer.train_on(batch)
    assert trainer.global_steps == 2 and trainer.checkpoint_manager.calls == [
        "update_weights@0",
        "sleep",
        "update_weights@1",
    ]
    # 7 rows (t1-0 has two sequences), padded to 12 (verl's mini-batch: 2 tasks x 3 rows); every row carries
    # its episode's GRPO advantage, as in the embedded trainer; padding rows train nothing
    seen = trainer.actor_rollout_wg.seen[0]
    assert seen["advantages"].shape[0] == 12
    trained = [i for i in range(12) if seen["response_mask"][i].sum() > 0]
    padding = [i for i in range(12) if i not in trained]
    assert len(trained) == 7 and float(seen["advantages"][padding].abs().sum()) == 0.0
    ours = episode_advantages(trainer.ajet_samples)
    want = {
        tuple(sq.prompt_ids + sq.response_ids): ours[ep.episode_uuid]
        for ep in trainer.ajet_samples
        for sq in ep.sequences
    }
    assert len(want) == 7
    for i in trained:
        n = int(seen["response_mask"][i].sum())
        expected = want[tuple(seen["tokens"][i])]
        assert seen["advantages"][i, :n] == pytest.approx(torch.full((n,), expected), abs=1e-5)
        assert float(seen["advantages"][i, n:].abs().sum()) == 0.0
    assert ours["t1-0"] > 0 > ours["t1-1"]  # t1-0 counted once in its group despite its two sequences
    assert metrics["critic/score/mean"] == pytest.approx(sum(0.0 + r for r in (1, 1, 0, 0.5, 0.2, 0.2, 0.9)) / 7)
    assert np.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] > 0
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())  # the update really ran
    # verl's checkpoint (save_freq=1) carries the step's record, for a crash before the store has it
    data = torch.load(tmp_path / "exp" / "verl_checkpoints" / "global_step_1" / "data.pt", weights_only=False)
    assert data["step"] == 1 and sorted(data["episode_uuids"]) == sorted(p.uuid for p in batch)


def test_verl_session_records_steps_registers_replicas_and_recovers_a_lost_record(multi_store, verl_trainer, tmp_path):
    trainer, job, _ = verl_trainer
    trainer.attach_store(multi_store, job, pad_id=0)
    trainer.begin()
    session = VerlSession(
        SessionPlace(job, 1, multi_store, tmp_path / "exp", 120.0), trainer, "/models/m", 0, False, None
    )
    session.register()
    logged = []
    trainer.logger.log = lambda data, step: logged.append((step, data))  # verl's Tracking: the job's trackers
    multi_store.record_evaluation("held_out", 1, Summary(2, 2, 0.5, 0.5), (0, 0), [])  # between two steps
    batch = select_batch(multi_store.pool_episodes(), BatchMode.TASKS, 2, 3)
    metrics = session.train(batch, {"wait_s": 0.5})
    assert session.policy_version == 1 and metrics["reward_mean"] == pytest.approx(sum(p.reward for p in batch) / 6)
    carried = {"eval/held_out/mean_reward": 0.5, "eval/held_out/pass@1": 0.5, "eval/held_out/version": 0.0}
    assert {k: v for k, v in metrics.items() if k.startswith("eval/")} == carried and (1, carried) in logged
    assert "loss" in metrics and metrics["verl/actor/pg_loss"] == metrics["loss"]
    assert 0 < metrics["trained_tokens"] <= metrics["tokens"]  # named as the embedded trainer names them
    step = multi_store.steps()[-1]
    assert (step.step, step.policy_version) == (1, 1) and multi_store.pool_episodes() == []
    deps = {d.name: d for d in multi_store.engines()}
    assert deps["verl-vllm-1"].base_url == "http://10.0.0.6:8000/v1"
    assert {(d.model, d.policy_version) for d in deps.values()} == {("/models/m", 1)}
    # the store lost step 1 (crash between verl's checkpoint and the record): the restart records it
    pending = trainer.train_dataloader.state_dict()
    multi_store.rollback_to_step(0, 0)
    assert len(multi_store.pool_episodes()) == 6
    reconcile_store(multi_store, 1, pending)
    assert [s.step for s in multi_store.steps()] == [1] and multi_store.pool_episodes() == []


def test_verl_session_consumes_a_batch_without_trainable_calls_without_an_update(tmp_path, verl_trainer):
    trainer, job, _ = verl_trainer
    st = Store(sqlite_url(tmp_path / "empty.db"))
    st.sync_job(AgentJetJob(batch_size=2, num_repeat=3))
    st.transition(ExperimentState.ROLLING)
    for i in range(6):
        uuid = f"e{i}"
        st.begin_episode(uuid, uuid, "c", "train", 60)
        st.write_calls(
            [CallRecord(uuid, 0, "{}", None, None, None, None, None, 0, "d", 1.0, 1.0, error="the engine answered 500")]
        )
        st.end_episode(uuid, "c", f"t{i % 2}", 1.0, None, {})
    trainer.attach_store(st, job, pad_id=0)
    trainer.begin()
    session = VerlSession(SessionPlace(job, 1, st, tmp_path / "exp", 120.0), trainer, "/m", 0, False, None)
    metrics = session.train(select_batch(st.pool_episodes(), BatchMode.TASKS, 2, 3), {})
    assert metrics["samples/empty_episodes"] == 6 and trainer.actor_rollout_wg.seen == []
    assert [s.step for s in st.steps()] == [1] and st.pool_episodes() == [] and session.policy_version == 1
    session.metrics.close()
    st.close()


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU box the verl backend starts for real")
def test_verl_backend_without_gpus_is_a_clear_error_not_a_hang(store, tmp_path):
    job = AgentJetJob(model="builtin:tiny", n_gpu=1)
    user = tmp_path / "over.yaml"
    user.write_text("actor_rollout_ref.rollout.tensor_model_parallel_size: 1\nactor_rollout_ref.actor.ppo_epochs: 3\n")
    opts = TrainerOptions.from_config(
        db_url="unused", backend="verl", engine="hybrid", experiment_dir=str(tmp_path / "exp"), verl_overrides=str(user)
    )
    with pytest.raises(TrainerError, match="hybrid needs 1 CUDA GPU"):
        open_session(job, 1, store, opts)
    written = yaml.safe_load((tmp_path / "exp" / "verl_config.yaml").read_text())  # composed before Ray is asked
    assert written["actor_rollout_ref"]["actor"]["ppo_epochs"] == 3 and written["critic"]["enable"] is False
    with pytest.raises(TrainerError, match="no such file"):
        open_session(
            job,
            1,
            store,
            TrainerOptions.from_config(
                db_url="unused",
                backend="verl",
                engine="hybrid",
                verl_overrides="/nope.yaml",
                experiment_dir=str(tmp_path / "exp"),
            ),
        )


def test_a_local_ray_that_times_out_starting_is_started_again_and_other_failures_are_not():
    slow = Exception(
        "The current node timed out during startup. This could happen because some of the raylet "
        "failed to startup or the GCS has become overloaded."
    )
    calls: list[str] = []

    def init(outcomes):
        def go():
            calls.append("init")
            if outcomes:
                raise outcomes.pop(0)

        return go

    start_local_ray(init([slow, slow]), lambda: calls.append("shutdown"))  # the third attempt starts
    assert calls == ["init", "shutdown", "init", "shutdown", "init"]
    calls.clear()
    with pytest.raises(Exception, match="timed out during startup"):
        start_local_ray(init([slow, slow, slow]), lambda: calls.append("shutdown"))
    assert calls.count("init") == 3
    calls.clear()
    with pytest.raises(ValueError, match="bad runtime env"):
        start_local_ray(init([ValueError("bad runtime env")]), lambda: calls.append("shutdown"))
    assert calls == ["init"]


@pytest.mark.parametrize(
    "n_gpu, cpus, rows, mini_rows, ranks",
    [
        (8, 2, 128, 128, 2),  # the seed's job on a 2-core box
        (1, 2, 4, 4, 1),  # fits: unchanged
        (8, 8, 6, 6, 8),  # fits: unchanged, whatever verl then says of the split
        (8, 4, 6, 6, 3),  # the most ranks that split 6 rows: 3
        (8, 3, 8, 4, 2),
        (4, 1, 8, 8, 1),
    ],
)
def test_n_gpu_becomes_the_ranks_a_cpu_node_holds(n_gpu, cpus, rows, mini_rows, ranks):
    assert cpu_ranks(n_gpu, cpus, rows, mini_rows) == ranks


def test_a_job_fitted_to_a_cpu_node_says_so_once(caplog):
    job = AgentJetJob(batch_size=32, num_repeat=4)  # n_gpu 8, the default
    with caplog.at_level("WARNING"):
        fitted = fit_job_to_cpus(job, 2)
        assert fit_job_to_cpus(fitted, 2) is fitted
    assert fitted.n_gpu == 2 and fitted.model_copy(update={"n_gpu": 8}) == job
    assert [r.getMessage() for r in caplog.records] == [
        "the job asks for n_gpu=8; on the CPU platform that is one gloo rank per CPU, and this node has 2: "
        "training with 2 rank(s) per node"
    ]


@pytest.mark.slow
def test_a_trainer_without_an_address_starts_its_own_ray_beside_anothers_cluster():
    """A Ray cluster already runs on this machine (another user's, or another test's): a trainer given no
    `--ray-address` starts a Ray of its own instead of silently joining that one (a plain `ray.init()` joins it;
    it did, and a test's verl workers found that cluster's CPUs taken)."""
    import subprocess
    import sys

    from ray.cluster_utils import Cluster

    from tests.support.procs import offline_env

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        code = (
            "import ray; from ajet_trainer.verl.launch import _ray_init;"
            "owns = _ray_init(None, 1, cpu=True); print(owns, ray.get_runtime_context().gcs_address); ray.shutdown()"
        )
        env = {k: v for k, v in offline_env().items() if k != "RAY_ADDRESS"}
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        owns, gcs = res.stdout.strip().splitlines()[-1].split()
        assert owns == "True" and gcs != cluster.address, (gcs, cluster.address)
    finally:
        cluster.shutdown()


def test_a_vision_language_model_is_refused_by_the_verl_backend_naming_the_embedded_one():
    """verl's actor takes a batch's pixels (test_verl_vision.py), but a swarm's store-fed step is not proven yet."""
    from ajet_trainer.errors import ConfigurationError
    from ajet_trainer.verl.session import refuse_vision

    with pytest.raises(ConfigurationError, match="--backend embedded"):
        refuse_vision(builtin_model_path("builtin:tiny-vl"))
    refuse_vision(builtin_model_path("builtin:tiny"))  # a text model goes on
