"""An update's freed memory goes back to the system (`ajet_trainer.freed_memory`): the heap's free pages a held
allocation pins stay resident until `give_back_freed_memory`, and the learner calls it after every update."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ajet_trainer.freed_memory import give_back_freed_memory

# 2,000 blocks of 64 KiB (under glibc's mmap threshold: they come from the heap), each followed by a block of 1 KiB that
# stays, so freeing the big ones cannot shrink the heap from its top: their pages stay resident until a trim.
PINNED_HEAP = """
import json, os, psutil
from ajet_trainer.freed_memory import give_back_freed_memory
rss = lambda: psutil.Process().memory_info().rss >> 20
before = rss()
big, kept = [], []
for _ in range(2000):
    big.append(os.urandom(64 * 1024))  # written, so its pages are resident
    kept.append(os.urandom(1024))  # over pymalloc's 512 bytes: from the same heap
del big
freed = rss()
given = give_back_freed_memory()
print(json.dumps({"before": before, "freed": freed, "trimmed": rss(), "given": given}))
"""


def test_free_pages_pinned_in_the_heap_go_back_to_the_system():
    if give_back_freed_memory() is False:
        pytest.fail("this machine's C library has no malloc_trim: the trainer runs on glibc here and in CI")
    out = subprocess.run([sys.executable, "-c", PINNED_HEAP], capture_output=True, text=True, check=True)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["given"] is True
    assert figures["freed"] - figures["before"] >= 100, figures  # freed, yet resident (what the trainer held)
    assert figures["freed"] - figures["trimmed"] >= 100, figures


def test_the_learner_gives_memory_back_after_each_update(tiny, monkeypatch):
    from ajet.job import AgentJetJob
    from ajet_trainer.embedded import learner as learner_module
    from ajet_trainer.types import EpisodeSample, TrainSequence

    calls: list[int] = []
    monkeypatch.setattr(learner_module, "give_back_freed_memory", lambda: bool(calls.append(1)) or True)
    model, tok = tiny
    learner = learner_module.Learner(model, tok, AgentJetJob(lr=1e-2))
    samples = [EpisodeSample(u, "t", r, (TrainSequence(u, "t", (5, 6), (40, 41), (1, 1), (0.0, 0.0)),))
               for u, r in (("a", 1.0), ("b", 0.0))]  # fmt: skip
    learner.update(samples)
    learner.update(samples)
    assert len(calls) == 2
