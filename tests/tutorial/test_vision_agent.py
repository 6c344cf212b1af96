"""The vision tutorial (tutorial/example_vision_agent): its screens and reward, and a short run of both arms through
`ajet-swarm start` (the full figures, three seeds: bench/vision.py)."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest
from PIL import Image

from ajet_swarm.launch import launched_swarm
from tutorial.example_vision_agent import agent_roll
from tutorial.example_vision_agent.agent_run import named_colour, screen_message
from tutorial.example_vision_agent.tasks import SIDE, answer_of, draw, held_out_tasks, task, train_tasks


def test_a_screen_is_drawn_from_its_seed_and_shows_its_answer():
    assert draw(7) == draw(7) and draw(7) != draw(8)
    for seed in range(40):
        pixels = Image.open(io.BytesIO(draw(seed))).convert("RGB")
        reds = sum(1 for r, g, b in pixels.getdata() if r > 150 and b < 100)
        blues = sum(1 for r, g, b in pixels.getdata() if b > 150 and r < 100)
        assert (reds > blues) == (answer_of(seed) == "red")  # the answer is in the pixels
    blank = Image.open(io.BytesIO(draw(3, blank=True)))
    assert blank.size == (SIDE, SIDE) and len(set(blank.getdata())) == 1  # the control's: nothing to see


def test_held_out_screens_are_balanced_fixed_and_apart_from_training():
    held_out = held_out_tasks(64)
    assert sum(t.metadata["answer"] == "red" for t in held_out) == 32
    assert [t.task_id for t in held_out] == [t.task_id for t in held_out_tasks(64)]
    assert {t.task_id for t in train_tasks(5000)}.isdisjoint(t.task_id for t in held_out)


def test_the_answer_is_read_as_the_json_string_it_is_constrained_to():
    assert named_colour('"red"') == "red" and named_colour("red") == "" and named_colour(None) == ""
    message = screen_message(task(1))
    assert message["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_model_learns_from_the_pixels_and_the_blind_arm_stays_at_chance(tmp_path: Path):
    with launched_swarm(tmp_path, timeout=600) as url:
        runs = {}
        for arm, steps in (("seen", 30), ("blank", 10)):  # the blank arm's answer cannot depend on what it sees
            argv = ["--swarm-url", url, "--max-steps", str(steps), "--held-out", "32", "--experiment", arm, "--quiet"]
            runs[arm] = asyncio.run(
                agent_roll.run(agent_roll.parser().parse_args(argv + (["--blank"] * (arm == "blank"))))
            )
    seen, blank = runs["seen"], runs["blank"]
    assert seen.held_out_before <= 0.7  # the untrained model cannot tell (0.5 is chance)
    assert seen.held_out_after >= 0.8, seen
    assert blank.held_out_after == 0.5  # one grey screen: one answer, half the held-out screens
