"""The control API over real HTTP: state machine, episode life cycle, bad input, errors."""

import math
import time
import uuid as uuid_mod

import httpx
import pytest

from ajet import AgentJetJob, Conflict, EpisodeNotFound, SwarmClient, SwarmTimeout, Task, Unauthorized, WorkflowOutput
from ajet.errors import JobConflict
from ajet.protocol import CLIENT_HEADER
from ajet.rollout_summary import format_rollout_stat
from ajet.types import EpisodeStatus, ExperimentState
from tests.support.rolling import ensure_rolling, make_rolling, wait_state


@pytest.fixture(scope="module")
def client(proxy):
    c = SwarmClient(proxy.url, begin_episode_max_wait=1.0)
    yield c
    c.close()


def test_state_machine_through_the_api(client, store, stub):
    client.stop_engine()
    assert client.get_engine_status().state == ExperimentState.OFFLINE
    client.stop_engine()  # harmless twice
    client.sync_train_config(AgentJetJob(batch_size=3, num_repeat=2, experiment_name="exp-a"))
    assert client.start_engine() == ExperimentState.BOOTING
    with pytest.raises(Conflict) as e:  # the experiment's job changes only while OFFLINE
        client.sync_train_config(AgentJetJob(experiment_name="exp-a"))
    assert e.value.state == "BOOTING"
    with pytest.raises(JobConflict, match="full fine-tuning"):  # another name: beside it only with LoRA
        client.sync_train_config(AgentJetJob())
    with pytest.raises(Conflict, match="BOOTING"):
        client.start_engine()
    with pytest.raises(SwarmTimeout):  # begin waits while BOOTING, bounded by begin_episode_max_wait
        client.begin_episode()
    make_rolling(store, stub.url)
    wait_state(client, ExperimentState.ROLLING)
    status = client.get_engine_status()
    assert status.job_synced and status.experiment_name == "exp-a"
    assert client.stop_engine() == ExperimentState.OFFLINE


def test_two_409s_are_told_apart_by_their_code(client, store, stub):
    """A wrong experiment's state and an episode conflict share a status; the SDK raises each by its code."""
    from ajet import EpisodeConflict, WrongState

    ensure_rolling(client, store, stub.url)
    with pytest.raises(WrongState) as state_err:
        client.sync_train_config(AgentJetJob())
    assert state_err.value.status == 409 and state_err.value.code.value == "WrongState"
    assert not isinstance(state_err.value, EpisodeConflict)
    uuid, _ = client.begin_episode()
    client.abort_episode(uuid)
    with pytest.raises(EpisodeConflict) as ep_err:
        client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=1.0))
    assert ep_err.value.status == 409 and ep_err.value.code.value == "EpisodeConflict"
    assert not isinstance(ep_err.value, WrongState) and isinstance(ep_err.value, Conflict)


def test_a_logger_not_installed_on_the_training_box_is_refused_at_sync(proxy, client):
    import importlib.util

    from ajet import InvalidRequest

    missing = next(m for m in ("mlflow", "swanlab", "clearml", "trackio") if importlib.util.find_spec(m) is None)
    client.stop_engine()
    with pytest.raises(InvalidRequest, match=f"logger '{missing}' needs the '{missing}' package") as err:
        client.sync_train_config(AgentJetJob(logging=["jsonl", missing]))
    assert err.value.fields == ["job.logging"] and err.value.status == 422  # the SDK carries the field it names
    r = httpx.post(proxy.url + "/swarm/sync_train_config", json={"job": {"logging": ["tensorbord"]}})
    assert r.status_code == 422 and "unknown logger 'tensorbord'" in r.json()["detail"]
    assert r.json()["fields"] == ["job.logging"]
    client.sync_train_config(AgentJetJob(logging=["jsonl", "tensorboard"]))  # installed here: accepted


@pytest.mark.parametrize(
    ("job", "field"),
    [
        ({"experiment_dir": "/tmp/elsewhere"}, "job.experiment_dir"),
        ({"experiment_dir": "../../../x"}, "job.experiment_dir"),
        ({"experiment_dir": "runs/../../x"}, "job.experiment_dir"),
        ({"experiment_name": "../up"}, "job.experiment_name"),
        ({"experiment_name": ".."}, "job.experiment_name"),
        ({"project_name": "a/b"}, "job.project_name"),
        ({"project_name": "a\\b"}, "job.project_name"),
    ],
)
def test_a_job_cannot_decide_where_the_server_writes(proxy, client, job, field):
    """Round three: a job whose folders named an absolute path, or climbed out with `..`, made the trainer write
    there. Each is a 422 naming the field; the stored job stays the one before."""
    client.stop_engine()
    client.sync_train_config(AgentJetJob(experiment_name="kept"))
    r = httpx.post(proxy.url + "/swarm/sync_train_config", json={"job": job})
    assert r.status_code == 422 and r.json()["fields"] == [field], r.text
    status = client.get_engine_status()
    assert status.experiment_name == "kept"


def test_an_absolute_experiment_dir_is_taken_when_the_proxy_allows_it(tmp_path):
    from ajet_store import Store, sqlite_url
    from tests.support.procs import start_proxy

    url = sqlite_url(tmp_path / "abs.db")
    px = start_proxy(tmp_path, url, "--allow-absolute-experiment-dir")
    try:
        r = httpx.post(px.url + "/swarm/sync_train_config", json={"job": {"experiment_dir": str(tmp_path / "x")}})
        assert r.status_code == 200, r.text
        r = httpx.post(px.url + "/swarm/sync_train_config", json={"job": {"experiment_dir": "../x"}})
        assert r.status_code == 422 and r.json()["fields"] == ["job.experiment_dir"]  # `..` never
    finally:
        px.close()
    st = Store(url)
    assert st.experiment().job.experiment_dir == str(tmp_path / "x")
    st.close()


def test_a_relative_experiment_dir_lands_under_the_trainers_experiments_root():
    from ajet_trainer.experiment_dir import EXPERIMENTS, default_experiment_dir

    assert default_experiment_dir(AgentJetJob(experiment_dir="runs/a"), None) == EXPERIMENTS / "runs" / "a"
    assert default_experiment_dir(AgentJetJob(project_name="p", experiment_name="e"), None) == EXPERIMENTS / "p" / "e"
    assert str(default_experiment_dir(AgentJetJob(), "/srv/exp")) == "/srv/exp"  # the operator's --experiment-dir


def test_begin_outside_rolling_is_503_with_retry_after(proxy, client):
    client.stop_engine()
    r = httpx.post(proxy.url + "/swarm/begin_episode", json={})
    assert r.status_code == 503
    assert r.headers["retry-after"] == "1"
    assert r.json()["state"] == "OFFLINE" and r.json()["error"] == "NotReady"


def test_begin_waits_until_rolling(client, store, stub):
    client.stop_engine()
    client.sync_train_config(AgentJetJob(batch_size=2, num_repeat=2))
    client.start_engine()
    slow = SwarmClient(client.server_url, begin_episode_max_wait=20)
    t0 = time.monotonic()
    import threading

    threading.Timer(1.0, make_rolling, args=(store, stub.url)).start()
    uuid, creds = slow.begin_episode()
    assert time.monotonic() - t0 >= 0.9
    assert creds.episode_uuid == uuid and creds.base_url == client.server_url + "/v1"
    slow.abort_episode(uuid)


def test_auto_sync_starts_or_joins(client, store, stub):
    client.stop_engine()
    job = AgentJetJob(batch_size=2, num_repeat=2, experiment_name="auto")
    assert client.auto_sync_train_config_and_start_engine(job) == ExperimentState.BOOTING
    make_rolling(store, stub.url)
    wait_state(client, ExperimentState.ROLLING)
    assert client.auto_sync_train_config_and_start_engine(job) == ExperimentState.ROLLING  # the same job joins
    other = AgentJetJob(batch_size=5, model="builtin:small", experiment_name="auto")
    with pytest.raises(JobConflict) as refused:  # another job of the experiment never joins silently
        client.auto_sync_train_config_and_start_engine(other)
    assert refused.value.status == 409 and "shared by every job on this swarm: model (" in refused.value.detail
    assert "the job's own: num_repeat, batch_size" in refused.value.detail
    elsewhere = other.model_copy(update={"experiment_name": "beside"})
    with pytest.raises(JobConflict, match="cannot run beside ajet-swarm/auto"):  # nor runs beside it (full FT)
        client.auto_sync_train_config_and_start_engine(elsewhere)
    assert store.experiment().job.batch_size == 2 and store.experiment().state == ExperimentState.ROLLING
    assert store.experiment_entries() == []
    assert client.auto_sync_train_config_and_start_engine(other, force_restart=True) == ExperimentState.BOOTING
    assert store.experiment().job.batch_size == 5
    # forced, a job that cannot run beside replaces the default experiment's, as on a swarm of one experiment
    assert client.auto_sync_train_config_and_start_engine(elsewhere, force_restart=True) == ExperimentState.BOOTING
    assert store.experiment().job.experiment_name == "beside" and store.experiment_entries() == []


def test_episode_life_cycle_and_idempotence(client, store, stub):
    ensure_rolling(client, store, stub.url)
    uuid, _ = client.begin_episode()
    task = Task(task_id="t-1")
    first = client.end_episode(task, uuid, WorkflowOutput(reward=0.5))
    again = client.end_episode(task, uuid, WorkflowOutput(reward=0.5))
    assert first == again and first.status == EpisodeStatus.ENDED and first.reward == 0.5
    with pytest.raises(Conflict, match="already ended"):
        client.end_episode(task, uuid, WorkflowOutput(reward=0.7))
    with pytest.raises(Conflict, match="already ended"):
        client.abort_episode(uuid)
    uuid2, _ = client.begin_episode()
    assert client.abort_episode(uuid2).status == EpisodeStatus.ABORTED
    assert client.abort_episode(uuid2).status == EpisodeStatus.ABORTED
    with pytest.raises(Conflict, match="aborted"):
        client.end_episode(task, uuid2, WorkflowOutput(reward=1))
    with pytest.raises(EpisodeNotFound):
        client.end_episode(task, "no-such-episode", WorkflowOutput(reward=1))
    other = SwarmClient(client.server_url)
    uuid3, _ = client.begin_episode()
    with pytest.raises(Conflict, match="held by client"):
        other.end_episode(task, uuid3, WorkflowOutput(reward=1))
    assert store.get_episode(uuid).reward == 0.5


@pytest.mark.parametrize(
    "route,body,field",
    [
        ("begin_episode", {"discard_episode_timeout": -1}, "discard_episode_timeout"),
        ("begin_episode", {"episode_type": "exam"}, "episode_type"),
        ("begin_episode", {"unknown": 1}, "unknown"),
        ("begin_episode", {"request_id": "not-hex"}, "request_id"),
        (
            "end_episode",
            {"episode_uuid": "u", "task": {"task_id": ""}, "workflow_output": {"reward": 1}},
            "task.task_id",
        ),
        ("end_episode", {"episode_uuid": "u", "task": {"task_id": "t"}, "workflow_output": {}}, "workflow_output"),
        ("end_episode", {"episode_uuid": "u", "task": {"task_id": "t"}}, "workflow_output"),
        (
            "end_episode",
            {"episode_uuid": "u", "task": {"task_id": "t"}, "workflow_output": {"reward": "high"}},
            "workflow_output.reward",
        ),
        ("abort_episode", {}, "episode_uuid"),
        ("sync_train_config", {"job": {"batch_size": 0}}, "job.batch_size"),
        ("set_batch_mode", {"mode": "sometimes"}, "mode"),
    ],
)
def test_malformed_bodies_are_422_with_the_field(proxy, route, body, field):
    r = httpx.post(f"{proxy.url}/swarm/{route}", json=body)
    assert r.status_code == 422, r.text
    assert field in r.json()["fields"], r.json()


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_reward_is_refused_and_episode_stays_open(proxy, client, store, stub, bad):
    ensure_rolling(client, store, stub.url)
    uuid, _ = client.begin_episode()
    raw = '{"episode_uuid": "%s", "task": {"task_id": "t"}, "workflow_output": {"reward": %s}}' % (uuid, bad)
    r = httpx.post(
        proxy.url + "/swarm/end_episode",
        content=raw,
        headers={"content-type": "application/json", "X-Ajet-Client": client.client_id},
    )
    assert r.status_code == 422 and "workflow_output.reward" in r.json()["fields"]
    assert store.get_episode(uuid).status == EpisodeStatus.OPEN
    with pytest.raises(ValueError):
        WorkflowOutput(reward=math.nan)


def test_not_json_is_422(proxy):
    r = httpx.post(proxy.url + "/swarm/end_episode", content=b"{oops", headers={"content-type": "application/json"})
    assert r.status_code == 422


def test_rollout_stat_and_batch_mode(client, store, stub):
    ensure_rolling(client, store, stub.url, job=AgentJetJob(batch_size=2, num_repeat=2, experiment_name="stat"))
    for task_id, rewards in (("a", [1, 0]), ("b", [1, 1])):
        for r in rewards:
            uuid, creds = client.begin_episode()
            creds.as_openai_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
            client.end_episode(Task(task_id=task_id), uuid, WorkflowOutput(reward=r))
    open_uuid, _ = client.begin_episode()
    stat = client.get_rollout_stat()
    prog = {p.mode.value: (p.current, p.target) for p in stat.progress}
    assert prog == {
        "rollout_until_finish_enough_episodes": (4, 4),
        "rollout_until_finish_enough_tasks": (2, 2),
        "rollout_until_finish_enough_non_dummy_tasks": (1, 2),
    }
    assert {t.task_id: (t.episodes, t.dummy) for t in stat.tasks} == {"a": (2, False), "b": (2, True)}
    assert [o.episode_uuid for o in stat.open_episodes] == [open_uuid]
    me = next(c for c in stat.clients if c.client_id == client.client_id)
    assert me.begun >= 5 and me.ended >= 4
    assert stat.batch_mode.value == "rollout_until_finish_enough_tasks"
    client.set_batch_mode("rollout_until_finish_enough_non_dummy_tasks")
    assert client.get_rollout_stat().batch_mode.value == "rollout_until_finish_enough_non_dummy_tasks"
    client.abort_episode(open_uuid)


def test_print_rollout_stat(client, store, stub, capsys):
    ensure_rolling(client, store, stub.url)
    client.print_rollout_stat()
    out = capsys.readouterr().out
    assert "engine ROLLING" in out and "tasks" in out and "non_dummy_tasks" in out


def test_openapi_schema_served(proxy):
    spec = httpx.get(proxy.url + "/openapi.json").json()
    for route in (
        "begin_episode",
        "end_episode",
        "abort_episode",
        "sync_train_config",
        "start_engine",
        "stop_engine",
        "get_engine_status",
        "get_rollout_stat",
        "auto_sync_train_config_and_start_engine",
    ):
        assert f"/swarm/{route}" in spec["paths"], route
    assert "/v1/chat/completions" in spec["paths"]


COMPOSED = {"rescore": {"reward_version", "unscored_episodes", "write_scores", "finish_reward_version"},
            "get_reward_versions": {"reward_versions"}, "resend_kept_rewards": {"end_episode"}}  # fmt: skip
"""SDK methods made of other routes than their own name: a re-scoring runs its function in the client, page by page;
the kept rewards are ends sent again."""


def test_sdk_methods_match_routes(proxy):
    spec = httpx.get(proxy.url + "/openapi.json").json()
    routes = {p.split("/")[-1] for p in spec["paths"] if p.startswith("/swarm/")}
    methods = {m for m in dir(SwarmClient) if not m.startswith("_")} - {"close", "print_rollout_stat"}
    assert routes == (methods - set(COMPOSED)) | set().union(*COMPOSED.values())
    assert set(COMPOSED) <= methods


def test_unreachable_proxy_is_a_typed_error():
    from ajet import SwarmConnectionError
    from tests.support.procs import free_port

    c = SwarmClient(f"http://127.0.0.1:{free_port()}", max_retries=1)
    with pytest.raises(SwarmConnectionError):
        c.get_engine_status()


@pytest.fixture(scope="module")
def token_proxy(module_tmp):
    from ajet_store import sqlite_url
    from tests.support.procs import start_proxy

    proc = start_proxy(module_tmp, sqlite_url(module_tmp / "token.db"), "--swarm-token", "s3cret")
    yield proc
    proc.close()


def test_start_without_job_is_409(token_proxy):
    c = SwarmClient(token_proxy.url, swarm_token="s3cret")
    with pytest.raises(Conflict, match="no job synced"):
        c.start_engine()


def test_swarm_token_guards_control_and_episode_keys_never_grant_it(token_proxy, stub):
    from ajet_store import Store

    with pytest.raises(Unauthorized):
        SwarmClient(token_proxy.url, swarm_token="wrong").get_engine_status()
    assert httpx.get(token_proxy.url + "/swarm/get_engine_status").status_code == 401
    good = SwarmClient(token_proxy.url, swarm_token="s3cret")
    good.sync_train_config(AgentJetJob(batch_size=1, num_repeat=1))
    good.start_engine()
    db = token_proxy.args[token_proxy.args.index("--db") + 1]
    with Store(db) as st:
        make_rolling(st, stub.url)
    wait_state(good, ExperimentState.ROLLING)
    uuid, creds = good.begin_episode()
    as_key = {"Authorization": f"Bearer {creds.api_key}"}
    for route in ("stop_engine", "start_engine"):
        assert httpx.post(f"{token_proxy.url}/swarm/{route}", headers=as_key).status_code == 401
    assert httpx.get(f"{token_proxy.url}/swarm/get_rollout_stat", headers=as_key).status_code == 401
    assert good.get_engine_status().state == ExperimentState.ROLLING
    # the data plane still takes the key
    r = httpx.post(
        f"{token_proxy.url}/v1/chat/completions",
        headers=as_key,
        json={"model": "x", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert r.status_code == 200


def test_the_token_is_checked_before_the_body_and_guards_the_docs(token_proxy):
    for path in ("/swarm/end_episode", "/swarm/sync_train_config"):
        r = httpx.post(token_proxy.url + path, content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 401 and r.json()["error"] == "Unauthorized"  # not 400/422: the body is never read
    for path in ("/docs", "/openapi.json", "/redoc"):
        assert httpx.get(token_proxy.url + path).status_code == 401
        assert httpx.get(token_proxy.url + path, headers={"Authorization": "Bearer s3cret"}).status_code == 200
    # a trailing or doubled slash reaches the same page through a redirect: it needs the token too (was 307)
    for path in ("/docs/", "/openapi.json/", "/redoc/", "//docs", "/swarm/get_engine_status/"):
        assert httpx.get(token_proxy.url + path).status_code == 401, path
    assert httpx.get(token_proxy.url + "/health").status_code == 200  # liveness stays open


def test_rewards_are_real_bounded_numbers_and_task_ids_bounded(proxy, client, store, stub):
    from ajet import InvalidRequest

    ensure_rolling(client, store, stub.url, job=AgentJetJob(batch_size=2, num_repeat=2, max_abs_reward=10))
    uuid, _ = client.begin_episode()
    base = {"episode_uuid": uuid, "task": {"task_id": "t"}}
    headers = {"X-Ajet-Client": client.client_id}
    for bad in ("1.0", True, None, 11.0, -1e39):
        r = httpx.post(
            proxy.url + "/swarm/end_episode", headers=headers, json={**base, "workflow_output": {"reward": bad}}
        )
        assert r.status_code == 422 and r.json()["error"] == "InvalidRequest", (bad, r.text)
        assert "reward" in r.json()["detail"] and r.json()["fields"][0].startswith("workflow_output"), r.json()
    long_task = {"task_id": "x" * 513}
    r = httpx.post(
        proxy.url + "/swarm/end_episode",
        headers=headers,
        json={**base, "task": long_task, "workflow_output": {"reward": 1.0}},
    )
    assert r.status_code == 422 and r.json()["fields"] == ["task.task_id"]
    with pytest.raises(InvalidRequest, match="max_abs_reward"):
        client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=10.5))
    assert store.get_episode(uuid).status == EpisodeStatus.OPEN  # nothing refused was written
    assert client.end_episode(Task(task_id="t"), uuid, WorkflowOutput(reward=10)).reward == 10.0


def _begin_raw(url: str, client_id: str, request_id: str) -> httpx.Response:
    return httpx.post(f"{url}/swarm/begin_episode", json={"request_id": request_id}, headers={CLIENT_HEADER: client_id})


def test_a_retried_begin_gets_its_episode_under_a_new_key(proxy, client, store, stub):
    """A begin the server committed but whose answer the client lost is answered again on its retry: the same
    episode, a fresh key (the lost one stops working), and no second episode that nobody holds."""
    ensure_rolling(client, store, stub.url)
    rid = uuid_mod.uuid4().hex
    first, retry = _begin_raw(proxy.url, "cl-a", rid), _begin_raw(proxy.url, "cl-a", rid)
    assert first.status_code == retry.status_code == 200
    ep = first.json()["episode_uuid"]
    assert retry.json()["episode_uuid"] == ep and retry.json()["api_key"] != first.json()["api_key"]
    assert [e.uuid for e in store.episodes(status=EpisodeStatus.OPEN) if e.client_id == "cl-a"] == [ep]
    chat = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    lost = httpx.post(f"{proxy.url}/v1/chat/completions", json=chat, headers=_bearer(first.json()["api_key"]))
    assert lost.status_code == 401
    used = httpx.post(f"{proxy.url}/v1/chat/completions", json=chat, headers=_bearer(retry.json()["api_key"]))
    assert used.status_code == 200
    late = _begin_raw(proxy.url, "cl-a", rid)  # its episode has a call now: the retry cannot take it over
    assert late.status_code == 409 and late.json()["error"] == "EpisodeConflict" and ep in late.json()["detail"]
    other = _begin_raw(proxy.url, "cl-b", rid)  # another client's id space
    assert other.status_code == 200 and other.json()["episode_uuid"] != ep


class _LosesFirstBeginAnswer(httpx.HTTPTransport):
    """Delivers the first `begin_episode` to the server, then drops its answer (a read error), as a connection
    closed under a waiting request does."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.url.path.endswith("/begin_episode") and not self.lost:
            self.lost += 1
            response.read()
            raise httpx.ReadError("answer lost", request=request)
        return response


def test_begin_episode_whose_answer_was_lost_leaves_no_orphan(proxy, client, store, stub):
    ensure_rolling(client, store, stub.url)
    transport = _LosesFirstBeginAnswer()
    lossy = SwarmClient(proxy.url, http_client=httpx.Client(base_url=proxy.url, transport=transport))
    ep, creds = lossy.begin_episode()
    assert transport.lost == 1
    assert [e.uuid for e in store.episodes(status=EpisodeStatus.OPEN) if e.client_id == lossy.client_id] == [ep]
    assert lossy.end_episode(Task(task_id="t"), ep, WorkflowOutput(reward=1.0)).status == EpisodeStatus.ENDED
    assert not [e for e in store.episodes(status=EpisodeStatus.OPEN) if e.client_id == lossy.client_id]


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_only_the_client_that_began_an_episode_aborts_it(client, store, stub):
    ensure_rolling(client, store, stub.url)
    uuid, _ = client.begin_episode()
    with pytest.raises(Conflict, match="held by client"):
        SwarmClient(client.server_url).abort_episode(uuid)
    assert store.get_episode(uuid).status == EpisodeStatus.OPEN
    assert client.abort_episode(uuid).status == EpisodeStatus.ABORTED


def test_an_episode_without_calls_keeps_its_reward_never_trains_and_warns_once(client, store, stub, caplog):
    import logging

    ensure_rolling(client, store, stub.url, job=AgentJetJob(batch_size=2, num_repeat=2))
    before = client.get_rollout_stat().totals.get("without_calls", 0)
    results, fresh = [], SwarmClient(client.server_url)  # a client that has not warned yet
    with caplog.at_level(logging.WARNING, logger="ajet.client"):
        for _ in range(2):  # e.g. an agent that died before its first LLM call
            uuid, _creds = fresh.begin_episode()
            results.append(fresh.end_episode(Task(task_id="z"), uuid, WorkflowOutput(reward=0.5)))
    fresh.close()
    assert all(r.reward == 0.5 and "made no LLM calls" in (r.warning or "") for r in results)
    assert sum("made no LLM calls" in rec.getMessage() for rec in caplog.records) == 1  # once per client
    for r in results:
        row = store.get_episode(r.episode_uuid)
        assert row.reward == 0.5 and row.untrainable and row.untrainable_reason == "the episode made no LLM calls"
    assert not {p.uuid for p in store.pool_episodes()} & {r.episode_uuid for r in results}
    stat = client.get_rollout_stat()
    assert stat.totals["without_calls"] == before + 2
    assert "without calls" in format_rollout_stat(stat)


def test_begin_episode_waits_while_no_engine_is_registered(tmp_path):
    """ROLLING in the store, but no engine registered (the trainer went down without a state change): a begin is
    503 with Retry-After, as outside ROLLING, and the SDK waits; once an engine registers, it begins (issue 30:
    the episode used to open and then could make no call)."""
    import threading

    from ajet_store.types import RegisteredEngine
    from tests.support.stub_proxy import proxy_on_stub

    with proxy_on_stub(tmp_path, "nodeps") as sp:
        px, st, stub, c = sp.proxy, sp.store, sp.stub, sp.client
        st.remove_engines()
        deadline = time.monotonic() + 5
        while True:  # the proxy sees the removal within its poll (0.2 s); a begin before that still opens
            r = httpx.post(px.url + "/swarm/begin_episode", json={}, headers={"X-Ajet-Client": "t"})
            if r.status_code != 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert r.status_code == 503 and r.json()["error"] == "NotReady" and "retry-after" in r.headers
        assert "no engine" in r.json()["detail"]
        later = threading.Timer(
            1.0, st.register_engines, [[RegisteredEngine("stub-0", stub.url + "/v1", "stub-model", 0)]]
        )
        later.start()
        t0 = time.monotonic()
        uuid, creds = c.begin_episode()  # waits it out
        assert time.monotonic() - t0 >= 0.5
        assert creds.as_openai_client().chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        later.join()


def test_the_proxys_explorer_needs_the_swarm_token_and_no_episode_key_opens_it(token_proxy):
    url = token_proxy.url
    for path in (
        "/explore/",
        "/explore",
        "/explore//live",
        "/explore/./episodes",
        "/explore/%2e/live",
        "/explore/live/",
    ):
        r = httpx.get(url + path)
        assert r.status_code == 401 and 'name="token"' in r.text, path
    assert httpx.get(url + "/explore/live", headers={"Authorization": "Bearer episode-key"}).status_code == 401
    r = httpx.get(url + "/explore/live", headers={"X-Swarm-Token": "s3cret"})
    assert r.status_code == 200 and r.json()["state"] in ("OFFLINE", "ROLLING", "BOOTING")
    assert httpx.get(url + "/explore/login").status_code == 200  # the form itself is open


def test_a_job_caps_its_open_episodes_and_a_begin_beyond_waits_for_one_to_end(client, store, stub):
    """Admission: with `max_open_episodes=2` a third episode is 503 NotReady naming the cap (the SDK waits it out,
    here for at most 1 s), and begins once one of the two ends."""
    ensure_rolling(client, store, stub.url, AgentJetJob(batch_size=2, num_repeat=2, max_open_episodes=2))
    first, _ = client.begin_episode()
    second, _ = client.begin_episode()
    impatient = SwarmClient(client.server_url, begin_episode_max_wait=1)
    with pytest.raises(SwarmTimeout, match=r"2 episodes open, its job's cap \(max_open_episodes=2\)") as waited:
        impatient.begin_episode()
    assert waited.value.__cause__.status == 503  # NotReady, waited out until begin_episode_max_wait
    client.abort_episode(first)
    third, _ = impatient.begin_episode()
    client.abort_episode(second)
    impatient.abort_episode(third)
    impatient.close()
