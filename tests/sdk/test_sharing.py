"""`ajet.sharing`: how two jobs differ, and the 409 that names it, the swarm's shared settings first."""

from ajet import AgentJetJob
from ajet.errors import JobConflict
from ajet.sharing import SHARED, job_conflict, job_differences


def test_equal_jobs_have_no_conflict_and_differences_come_in_field_order():
    job = AgentJetJob(batch_size=2, lora_rank=8)
    assert job_conflict(job, AgentJetJob(batch_size=2, lora_rank=8)) is None
    other = AgentJetJob(batch_size=3, lora_rank=8, lr=1e-3, model="builtin:small")
    assert job_differences(job, other) == ["model", "batch_size", "lr"]


def test_the_conflict_names_the_shared_settings_first_with_why():
    lengths = {"max_prompt_length": 1024, "max_response_length": 1024}
    running = AgentJetJob(project_name="lab", experiment_name="letters", max_model_len=4096, **lengths)
    other = AgentJetJob(project_name="lab", experiment_name="letters", max_model_len=8192, seed=3, **lengths)
    conflict = job_conflict(running, other)
    assert isinstance(conflict, JobConflict) and conflict.status == 409
    assert conflict.detail.startswith("the swarm trains lab/letters, and this job differs from it in shared by")
    assert f"max_model_len ({SHARED['max_model_len']}); the job's own: seed." in conflict.detail
    assert "force_restart=True" in conflict.detail
    assert set(SHARED) <= set(AgentJetJob.model_fields)  # every shared setting is a job field
