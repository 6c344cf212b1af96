"""Episodes played straight through the SDK, for tests that drive a trainer through the proxy."""

from __future__ import annotations

from ajet import SwarmClient, Task, WorkflowOutput


def play_batch(client: SwarmClient, batch: int, tasks: tuple[str, ...] = ("a", "b"), group: int = 2) -> None:
    """One batch: for each task `group` episodes of one chat call ("say <task>"), task id `<batch>-<task>`.

    Episode k of a group gets reward k (0 if the answer was empty), so every group has a spread and
    GRPO has a signal.
    """
    for task_id in tasks:
        for k in range(group):
            uuid, creds = client.begin_episode()
            out = creds.as_openai_client(max_retries=0).chat.completions.create(
                model="anything", messages=[{"role": "user", "content": f"say {task_id}"}], seed=k
            )
            client.end_episode(
                Task(task_id=f"{batch}-{task_id}"),
                uuid,
                WorkflowOutput(reward=float(k) if out.choices[0].message.content else 0.0),
            )
