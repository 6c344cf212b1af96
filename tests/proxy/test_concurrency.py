"""200 episodes from many threads through a real proxy: nothing lost, every call logged."""

import threading

from ajet import SwarmClient, Task, WorkflowOutput
from ajet.types import EpisodeStatus
from ajet.utils.thread_executors import run_episodes_until_all_complete
from tests.support.rolling import ensure_rolling

N_EPISODES = 200
CALLS_PER_EPISODE = 3


def test_200_episodes_from_many_threads(proxy, store, stub):
    client = SwarmClient(proxy.url)
    from ajet import AgentJetJob

    ensure_rolling(client, store, stub.url, job=AgentJetJob(batch_size=50, num_repeat=4, experiment_name="conc"))
    lock = threading.Lock()
    answers: dict[str, list[str]] = {}

    def episode(i: int) -> str:
        uuid, creds = client.begin_episode()
        oc = creds.as_openai_client(max_retries=0)
        msgs = [{"role": "user", "content": f"episode {i}"}]
        texts = []
        for turn in range(CALLS_PER_EPISODE):
            stream = turn == 1
            if stream:
                text = "".join(
                    c.choices[0].delta.content or ""
                    for c in oc.chat.completions.create(model="m", messages=msgs, stream=True)
                    if c.choices
                )
            else:
                text = oc.chat.completions.create(model="m", messages=msgs).choices[0].message.content
            texts.append(text)
            msgs = msgs + [{"role": "assistant", "content": text}, {"role": "user", "content": f"turn {turn}"}]
        client.end_episode(Task(task_id=f"task-{i % 50}"), uuid, WorkflowOutput(reward=float(i % 3)))
        with lock:
            answers[uuid] = texts
        return uuid

    uuids = run_episodes_until_all_complete(range(N_EPISODES), episode, max_workers=32, auto_retry=False)
    assert None not in uuids and len(set(uuids)) == N_EPISODES
    for uuid in uuids:
        row = store.get_episode(uuid)
        assert row.status == EpisodeStatus.ENDED and row.num_calls == CALLS_PER_EPISODE
        calls = store.calls(uuid)  # end_episode answered after its calls were committed
        assert [c.seq for c in calls] == list(range(CALLS_PER_EPISODE))
        assert all(c.completion_ids and c.prompt_ids and c.error is None for c in calls)
        # multi-turn prompts extend the previous prompt + completion exactly
        for a, b in zip(calls, calls[1:]):
            prefix = a.prompt_ids + a.completion_ids[:-1]  # the stub's EOS is not re-rendered in the next prompt
            assert b.prompt_ids[: len(prefix)] == prefix
    stat = client.get_rollout_stat()
    assert stat.progress[0].current == N_EPISODES
    assert stat.progress[1].current == 50  # 50 tasks x 4 episodes
