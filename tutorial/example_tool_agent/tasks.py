"""The tool agent's tasks: sums and differences of three-digit numbers and products of two-digit ones, generated
from a seed, split into train and held-out.

SmolLM2-135M cannot do these in its head (it answers with a wrong number nearly always), so a right answer needs the
calculator, with the question's operation and numbers; the split is by question, so no held-out question is trained.
"""

from __future__ import annotations

import random

from ajet import Task
from tutorial.example_tool_agent.calculator import OPERATIONS

RANGES = {"add": (100, 999), "subtract": (100, 999), "multiply": (12, 99)}
"""Each operation's operand range: no answer is a one-digit guess."""
QUESTION = "What is {a} {sign} {b}?"


def make_task(op: str, a: int, b: int) -> Task:
    """One question, its answer in `metadata["answer"]` (what the reward compares with)."""
    sign, fn = OPERATIONS[op]
    return Task(
        task_id=f"{op}-{a}-{b}",
        main_query=QUESTION.format(a=a, sign=sign, b=b),
        metadata={"answer": str(fn(a, b)), "operation": op},
    )


def split_tasks(seed: int = 0, train: int = 96, held_out: int = 32) -> tuple[list[Task], list[Task]]:
    """`train` and `held_out` distinct questions, the operations in turn, the same for the same seed."""
    rng = random.Random(seed)
    tasks: dict[str, Task] = {}
    ops = list(RANGES)
    while len(tasks) < train + held_out:
        op = ops[len(tasks) % len(ops)]
        low, high = RANGES[op]
        a, b = sorted((rng.randint(low, high), rng.randint(low, high)), reverse=op == "subtract")
        task = make_task(op, a, b)
        tasks.setdefault(task.task_id, task)
    ordered = list(tasks.values())
    return ordered[:train], ordered[train:]
