"""The tool agent's tasks: products of two two-digit numbers, generated from a seed, split into train and held-out.

A 135M model cannot multiply 47 by 86 in its head (it answers with a wrong number nearly always), so a right answer
needs the calculator; the split is by operand pair, so no held-out question is ever trained on.
"""

from __future__ import annotations

import random

from ajet import Task

LOW, HIGH = 12, 99
"""The operands' range: every product has three or four digits."""
QUESTION = "What is {a} * {b}?"


def make_task(a: int, b: int) -> Task:
    """One question, its answer in `metadata["answer"]` (what the reward compares with)."""
    return Task(
        task_id=f"mul-{a}-{b}",
        main_query=QUESTION.format(a=a, b=b),
        metadata={"answer": str(a * b), "a": a, "b": b},
    )


def split_tasks(seed: int = 0, train: int = 64, held_out: int = 32) -> tuple[list[Task], list[Task]]:
    """`train` and `held_out` tasks on distinct operand pairs, the same for the same seed."""
    rng = random.Random(seed)
    pairs: list[tuple[int, int]] = []
    seen: set[tuple[int, int]] = set()
    while len(pairs) < train + held_out:
        pair = (rng.randint(LOW, HIGH), rng.randint(LOW, HIGH))
        if pair not in seen and pair[::-1] not in seen:
            seen.add(pair)
            pairs.append(pair)
    tasks = [make_task(a, b) for a, b in pairs]
    return tasks[:train], tasks[train:]
