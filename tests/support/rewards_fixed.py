"""Reward functions a re-scoring's tests import as `module:function` (the right one, and ones that fail)."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from ajet import WorkflowOutput
from ajet.rescore_types import StoredEpisode


def right_sum(ep: StoredEpisode) -> WorkflowOutput:
    """1 when the final answer states the task's reference sum (the bug fixed: calling the tool is not enough)."""
    said = re.findall(r"-?\d+", ep.final_answer)
    right = bool(said) and int(said[-1]) == ep.task.metadata["answer"]
    return WorkflowOutput(reward=float(right), is_success=right)


def half(ep: StoredEpisode) -> float:
    """0.5 for any episode."""
    return 0.5


def fails_on_odd(ep: StoredEpisode) -> float:
    """Raises on the odd-numbered episodes, scores the others 0.5."""
    if int(ep.episode_uuid.rsplit("-", 1)[1]) % 2:
        raise ValueError(f"cannot score {ep.episode_uuid}")
    return 0.5


def killed_midway(ep: StoredEpisode) -> WorkflowOutput:
    """`right_sum`, but the process is SIGKILLed at the episode `AJET_TEST_KILL_AT` names (a re-scoring killed)."""
    if ep.episode_uuid == os.environ.get("AJET_TEST_KILL_AT"):
        Path(os.environ["AJET_TEST_KILLED_FLAG"]).write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)
    return right_sum(ep)
