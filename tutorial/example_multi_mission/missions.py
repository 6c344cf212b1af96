"""Two missions training one model: each has its own dataset and its own reward.

- `letters`: "Say the letter: c" -> reward 1.0 if the answer starts with that letter.
- `digits`:  "Say the digit: 7"  -> reward 1.0 for the digit, 0.5 for any other digit (a different rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import openai

from ajet import AjetTaskReader, JsonlDatasetFile, JsonlTrainingFp, RouterTaskReader, Task, WorkflowOutput

HERE = Path(__file__).resolve().parent
_BASE_CLIENT = openai.OpenAI(base_url="http://127.0.0.1", api_key="unused", max_retries=2)


def letters_reward(task: Task, answer: str) -> float:
    return 1.0 if answer[:1] == task.metadata["target"] else 0.0


def digits_reward(task: Task, answer: str) -> float:
    if answer[:1] == task.metadata["target"]:
        return 1.0
    return 0.5 if answer[:1].isdigit() else 0.0


@dataclass(frozen=True)
class Mission:
    """A dataset and its reward."""

    name: str
    dataset: Path
    reward: Callable[[Task, str], float]

    def tasks(self) -> list[Task]:
        return RouterTaskReader(
            "jsonl_dataset_file",
            AjetTaskReader(jsonl_dataset_file=JsonlDatasetFile(training=JsonlTrainingFp(file_path=str(self.dataset)))),
        ).generate_training_tasks()

    def run_agent_and_compute_reward(self, task: Task, base_url: str, api_key: str) -> WorkflowOutput:
        client = _BASE_CLIENT.with_options(base_url=base_url, api_key=api_key)
        answer = (
            client.chat.completions.create(
                model="policy", max_tokens=1, temperature=1.0, messages=[{"role": "user", "content": task.main_query}]
            )
            .choices[0]
            .message.content
            or ""
        )
        return WorkflowOutput(reward=self.reward(task, answer), metadata={"answer": answer, "mission": self.name})


MISSIONS = {
    m.name: m
    for m in (
        Mission("letters", HERE / "letters.jsonl", letters_reward),
        Mission("digits", HERE / "digits.jsonl", digits_reward),
    )
}
