"""AgentJetJob: defaults, validation rules, YAML round trip."""

import pytest
import yaml
from pydantic import ValidationError

from ajet import AgentJetJob, BatchMode, ConfigError
from ajet.default_config.ajet_default import default_job, default_job_yaml

SEED_DEFAULTS = dict(
    experiment_dir="auto",
    n_gpu=8,
    algorithm="grpo",
    num_repeat=4,
    batch_size=32,
    swarm_mode_sample_collection_method="rollout_until_finish_enough_tasks",
    max_env_worker=128,
    max_prompt_length=3000,
    max_response_length=15000,
    max_response_length_in_one_turn=4096,
    max_model_len=18000,
    mini_batch_num=1,
    lora_rank=0,
    lora_alpha=16,
    lora_target_modules="all-linear",
    gpu_memory_utilization=0.85,
    lr=1e-6,
    ppo_epochs=1,
)


def test_seed_defaults():
    wire = AgentJetJob().to_wire()
    for k, v in SEED_DEFAULTS.items():
        assert wire[k] == v, k
    assert default_job() == wire
    dumped = yaml.safe_load(default_job_yaml())
    assert {**dumped["ajet"], "verl": dumped["verl"]} == wire


def test_seed_backbone_argument_accepted_and_checked(tmp_path):
    assert AgentJetJob(backbone="verl", batch_size=3).batch_size == 3  # the seed passes it
    assert "backbone" not in AgentJetJob(backbone="verl").to_wire()  # verl's algorithms run in every backend
    with pytest.raises(ValidationError, match="only 'verl'"):
        AgentJetJob(backbone="trinity")
    old = tmp_path / "old.yaml"
    old.write_text("ajet:\n  backbone: verl\n  batch_size: 5\n")  # a job.yaml written before the field went
    assert AgentJetJob.from_yaml(old).batch_size == 5


def test_length_fields_must_be_set_together():
    with pytest.raises(ValidationError, match="set the length fields together"):
        AgentJetJob(max_prompt_length=100)
    AgentJetJob(max_prompt_length=100, max_response_length=100, max_model_len=200)


def test_prompt_plus_response_within_model_len():
    with pytest.raises(ValidationError, match="max_model_len"):
        AgentJetJob(max_prompt_length=100, max_response_length=200, max_model_len=250)


@pytest.mark.parametrize(
    "field,value",
    [
        ("num_repeat", 0),
        ("batch_size", 0),
        ("lr", 0.0),
        ("lora_rank", -1),
        ("swarm_mode_sample_collection_method", "whenever"),
        ("algorithm", "ppo"),
        ("gpu_memory_utilization", 1.5),
    ],
)
def test_invalid_values_refused(field, value):
    with pytest.raises(ValidationError, match=field):
        AgentJetJob(**{field: value})


def test_unknown_field_refused():
    with pytest.raises(ValidationError, match="batchsize"):
        AgentJetJob(batchsize=4)


def test_yaml_round_trip(tmp_path):
    job = AgentJetJob(
        experiment_name="x",
        batch_size=7,
        num_repeat=3,
        lora_rank=8,
        lora_target_modules=["q_proj"],
        swarm_mode_sample_collection_method=BatchMode.NON_DUMMY_TASKS,
        verl={"trainer": {"total_epochs": 2}, "actor_rollout_ref.actor.optim.lr": 1e-6},
    )
    assert job.verl == {"trainer.total_epochs": 2, "actor_rollout_ref.actor.optim.lr": 1e-6}  # dotted keys
    path = job.dump_job_as_yaml(tmp_path / "job.yaml")
    assert AgentJetJob.from_yaml(path) == job
    assert AgentJetJob().build_job_from_yaml(path).to_wire() == job.to_wire()


def test_yaml_values_override(tmp_path):
    path = tmp_path / "o.yaml"
    path.write_text("ajet:\n  batch_size: 3\n  lr: 0.001\n")
    job = AgentJetJob(batch_size=9, num_repeat=5)
    out = job.build_job_from_yaml(path)
    assert out is job
    assert (job.batch_size, job.lr, job.num_repeat) == (3, 0.001, 5)


def test_yaml_errors_name_the_problem(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        AgentJetJob().build_job_from_yaml(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("batch_sise: 3\n")
    with pytest.raises(ConfigError, match="'batch_sise'; did you mean 'batch_size'"):
        AgentJetJob().build_job_from_yaml(bad)
    section = tmp_path / "section.yaml"
    section.write_text("ajet:\n  batch_size: 3\nverll:\n  trainer.total_epochs: 2\n")
    with pytest.raises(ConfigError, match="'verll'; did you mean 'verl'"):
        AgentJetJob().build_job_from_yaml(section)
    worse = tmp_path / "worse.yaml"
    worse.write_text("batch_size: 0\n")
    with pytest.raises(ConfigError, match="batch_size"):
        AgentJetJob().build_job_from_yaml(worse)


def test_base_yaml_config_applies_at_construction(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("batch_size: 5\nnum_repeat: 6\n")
    job = AgentJetJob(base_yaml_config=str(base), num_repeat=2)
    assert (job.batch_size, job.num_repeat) == (5, 2)


def test_a_stored_job_of_an_earlier_version_parses_without_its_client_files(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("batch_size: 7\n")
    job = AgentJetJob(base_yaml_config=str(base))
    wire = {**job.to_wire(), "bench_update_delay_s": 2.0}  # a field an earlier version had
    base.unlink()  # the base YAML stays on the client's machine
    back = AgentJetJob.from_stored(wire)
    assert back == job and back.batch_size == 7 and back.base_yaml_config == str(base)
    with pytest.raises(ValueError):
        AgentJetJob.model_validate(wire)  # the wire itself stays strict


def test_a_job_from_the_wire_is_not_merged_again_with_a_base_yaml_it_cannot_see(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("batch_size: 7\n")
    wire = AgentJetJob(base_yaml_config=str(base)).to_wire()
    base.unlink()  # the proxy's machine has no such file
    job = AgentJetJob.from_wire(wire)
    assert job.batch_size == 7 and job.base_yaml_config == str(base)
    with pytest.raises(ValueError, match="bench_update_delay_s"):
        AgentJetJob.from_wire({**wire, "bench_update_delay_s": 1.0})  # strict about fields, unlike from_stored
    with pytest.raises(ValueError):
        AgentJetJob.from_wire({**wire, "base_yaml_config": 3})
