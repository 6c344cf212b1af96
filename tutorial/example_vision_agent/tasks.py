"""The task only pixels can solve: a shape is drawn red or blue on a noisy grey screen, and the question's text is the
same for every image, so the text alone answers right half the time.

Each task is one seed: it draws the image (a 56 x 56 PNG, 4 image tokens on `builtin:tiny-vl`) and its answer. The
control arm's image (`blank=True`) is one flat grey of the same size: the answer is still drawn, but nothing shows it.
"""

from __future__ import annotations

import io
import random

from PIL import Image, ImageDraw

from ajet import Task

COLOURS = {"red": (210, 40, 40), "blue": (40, 60, 210)}
"""The answers, and the colour each is drawn in (each channel jittered by up to `JITTER`)."""
SIDE = 56
"""The image's width and height in pixels."""
JITTER = 30
QUESTION = "What colour is the shape? Answer red or blue."
HELD_OUT_BASE = 1_000_000
"""Held-out seeds start here: no training seed draws the same image."""


def answer_of(seed: int) -> str:
    """The colour a seed's shape is drawn in."""
    return random.Random(seed).choice(sorted(COLOURS))


def draw(seed: int, blank: bool = False) -> bytes:
    """The seed's screen as a PNG: grey noise, a few grey and green specks, one filled shape in its colour (or, with
    `blank`, a flat grey screen of the same size)."""
    if blank:
        return _png(Image.new("RGB", (SIDE, SIDE), (128, 128, 128)))
    rng = random.Random(seed)
    colour = COLOURS[rng.choice(sorted(COLOURS))]
    shade = rng.randint(100, 160)
    img = Image.new("RGB", (SIDE, SIDE), (shade, shade, shade))
    pen = ImageDraw.Draw(img)
    for _ in range(rng.randint(2, 5)):  # distractors that are neither red nor blue
        x, y, r = rng.randint(0, SIDE), rng.randint(0, SIDE), rng.randint(2, 5)
        pen.ellipse((x - r, y - r, x + r, y + r), fill=rng.choice([(60, 170, 60), (220, 220, 220), (40, 40, 40)]))
    size = rng.randint(20, 36)
    x0, y0 = rng.randint(0, SIDE - size), rng.randint(0, SIDE - size)
    fill = tuple(max(0, min(255, c + rng.randint(-JITTER, JITTER))) for c in colour)
    shape = pen.ellipse if rng.random() < 0.5 else pen.rectangle
    shape((x0, y0, x0 + size, y0 + size), fill=fill)
    return _png(img)


def _png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def task(seed: int) -> Task:
    """One task: its seed and answer in its metadata (the agent draws its image)."""
    return Task(task_id=f"screen-{seed}", main_query=QUESTION, metadata={"seed": seed, "answer": answer_of(seed)})


def train_tasks(n: int, seed: int = 0) -> list[Task]:
    """`n` training tasks."""
    return [task(seed * 100_000 + i) for i in range(n)]


def held_out_tasks(n: int) -> list[Task]:
    """`n` held-out tasks (even), half of each colour, the same for every run: a policy that gives one answer whatever
    it sees (the control arm's, on one grey screen) scores exactly 0.5."""
    chosen: dict[str, list[Task]] = {c: [] for c in COLOURS}
    seed = HELD_OUT_BASE
    while any(len(tasks) < n // 2 for tasks in chosen.values()):
        colour = answer_of(seed)
        if len(chosen[colour]) < n // 2:
            chosen[colour].append(task(seed))
        seed += 1
    return sorted((t for tasks in chosen.values() for t in tasks), key=lambda t: t.metadata["seed"])
