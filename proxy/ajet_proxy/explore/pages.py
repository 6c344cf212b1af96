"""The explorer's pages: server-rendered HTML over the store, read-only.

Each handler reads what its page shows through the store's paged, indexed reads (`ajet_store.explore_reads`) and
renders one Jinja2 template with autoescaping on, so model text (HTML, `<script>`, escapes) always shows as text.
Handlers are plain functions: Starlette runs them in its thread pool, off the event loop.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Optional, Protocol

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from ajet.errors import EpisodeNotFound
from ajet.storable import EPISODE_UUID_PATTERN
from ajet_core.images import image_url_of, stored_ref
from ajet_proxy.explore.advantages import group_advantages
from ajet_proxy.explore.charts import charts
from ajet_proxy.explore.tokens import load_token_text, token_cells, tokenizer_folder
from ajet_proxy.explore_paths import EXPERIMENT_PATH, experiment_base
from ajet_proxy.stats import answer_text, request_messages
from ajet_store import Store
from ajet_store.explore_reads import SORTS, EpisodeFilter
from ajet_store.placement import DEFAULT_SLUG
from ajet_store.sequences import built_sequences

PAGE = 50
"""Episodes per page of a list."""
HERE = Path(__file__).parent
TEMPLATES = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True))
CONTROL_PICTURES = {c: 0x2400 + c for c in range(32) if chr(c) not in "\n\t"} | {127: 0x2421}
"""Control characters (an ANSI escape's ESC among them) drawn as their Unicode pictures: seen, never obeyed."""
TEMPLATES.filters["visible"] = lambda text: str(text).translate(CONTROL_PICTURES)
TEMPLATES.filters["image_sha"] = lambda part: stored_image_sha(part)


def stored_image_sha(part: object) -> str:
    """The hash of the stored image a content part shows ("" when it shows none): the call log names each image
    `ajet-image:<sha256>` (chat's `image_url.url`, Responses' `image_url`, Messages' `source.data`)."""
    if not isinstance(part, dict):
        return ""
    source = part.get("source")
    data = source.get("data") if isinstance(source, dict) else None
    return stored_ref(image_url_of(part) or (data if isinstance(data, str) else "")) or ""


class Experiments(Protocol):
    """The experiments an explorer shows: the proxy's (`ajet_proxy.app`), or those a store lists (`serve.py`)."""

    def store(self, slug: str) -> Store:
        """The store of experiment `slug`; `ExperimentNotFound` for one the swarm does not have."""
        ...

    def listed(self) -> list[tuple[str, str]]:
        """(name, slug) of every experiment, the default first."""
        ...


def explorer_root(request: Request) -> str:
    """Where the explorer is mounted (`/explore`), whichever experiment's page the request asks for."""
    root, slug = request.scope.get("root_path", ""), request.path_params.get("slug")
    return root.removesuffix(f"{EXPERIMENT_PATH}/{slug}") if slug else root


class Pages:
    """The page handlers of one explorer, each page over the store of the experiment its path names."""

    def __init__(self, experiments: Experiments, tokenizer: Optional[str] = None):
        self.experiments, self.tokenizer = experiments, tokenizer

    def store(self, request: Request) -> Store:
        """The store of the request's experiment (`ExperimentNotFound`: the app answers its 404 page); the root's
        pages are the default experiment's."""
        return self.experiments.store(request.path_params.get("slug", DEFAULT_SLUG))

    def _render(self, request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        """A page, its links under the request's experiment (`base`), beside links to every experiment."""
        base, top = request.scope.get("root_path", ""), explorer_root(request)
        links = [(n, experiment_base(top, slug)) for n, slug in self.experiments.listed()]
        html = TEMPLATES.get_template(name).render(base=base, experiments=links, **context)
        return HTMLResponse(html, status_code=status)

    def runs(self, request: Request) -> Response:
        """The run: its job and state, each metric (and each evaluated task set) as a chart over the steps, the
        newest steps."""
        store = self.store(request)
        exp, steps = store.experiment(), store.steps(last=500)
        name = "runs_body.html" if request.query_params.get("fragment") == "1" else "runs.html"
        latest = steps[-1].step if steps else 0
        drawn = charts(steps, store.evaluations())
        return self._render(request, name, exp=exp, steps=steps[::-1][:PAGE], charts=drawn, latest=latest)

    def live(self, request: Request) -> Response:
        """The newest step and the state (what the runs page polls to redraw itself)."""
        store = self.store(request)
        exp, newest = store.experiment(), store.steps(last=1)
        return JSONResponse({"step": newest[0].step if newest else 0, "state": exp.state.value})

    def step(self, request: Request) -> Response:
        """One step: its metrics and its GRPO groups."""
        n = _int(request.path_params["step"])
        row = self.store(request).step_row(n)
        if row is None:
            return self._render(request, "missing.html", 404, what=f"step {n}")
        return self._render(request, "step.html", step=row, tasks=self.store(request).step_tasks(n),
                            metrics=sorted(row.metrics.items()))  # fmt: skip

    def episodes(self, request: Request) -> Response:
        """Episodes filtered by step, task, status, client, mission and reward, sorted, a page at a time."""
        q = request.query_params
        f = EpisodeFilter(step=_opt_int(q.get("step")), task_id=q.get("task") or None, status=q.get("status") or None,
                          client_id=q.get("client") or None, mission=q.get("mission") or None,
                          reward_min=_opt_float(q.get("min")), reward_max=_opt_float(q.get("max")),
                          differs_in=_opt_int(q.get("differs")),
                          sort=q.get("sort") if q.get("sort") in SORTS else "newest")  # fmt: skip
        page = max(0, _opt_int(q.get("page")) or 0)
        found = self.store(request).episode_page(f, PAGE + 1, page * PAGE)
        return self._render(request, "episodes.html", episodes=found[:PAGE], more=len(found) > PAGE, page=page, f=f,
                            sorts=list(SORTS), query=dict(q))  # fmt: skip

    def group(self, request: Request) -> Response:
        """One GRPO group side by side: the task's episodes of one step, their rewards, advantages and answers."""
        n, task = _int(request.path_params["step"]), request.path_params["task"]
        store = self.store(request)
        members = store.group(n, task)
        if not members:
            return self._render(request, "missing.html", 404, what=f"group {task!r} of step {n}")
        advantages = group_advantages([float(e.reward or 0.0) for e in members])
        answers = [_final_answer(store, e.uuid) for e in members]
        return self._render(request, "group.html", step=n, task=task, rows=list(zip(members, advantages, answers)))

    def episode(self, request: Request) -> Response:
        """One episode: each call's messages and answer, and each trained sequence token by token."""
        store, uuid = self.store(request), request.path_params["uuid"]
        try:
            if not re.fullmatch(EPISODE_UUID_PATTERN, uuid):  # names no episode; PostgreSQL would refuse a NUL
                raise EpisodeNotFound(uuid)
            ep = store.get_episode(uuid)
        except EpisodeNotFound:
            return self._render(request, "missing.html", 404, what=f"episode {uuid!r}")
        calls = store.calls(uuid)
        job = store.experiment().job
        text = load_token_text(tokenizer_folder(job.model if job else None, self.tokenizer))
        built, merged = built_sequences(calls, ep.uuid, ep.task_id or "")
        sequences = [(b, token_cells(b, text), sum(b.sequence.response_mask)) for b in built]
        shown = [(c, request_messages(c.request), answer_text(c.response), _pretty(c.request)) for c in calls]
        versions = {v.version: v.function for v in store.reward_versions()}
        rewards = [(r, versions.get(r.version, "the client's")) for r in store.episode_rewards(uuid)]
        return self._render(request, "episode.html", ep=ep, calls=shown, sequences=sequences, merged=merged,
                            ids_only=text(0).startswith("<0>"), rewards=rewards)  # fmt: skip

    def image(self, request: Request) -> Response:
        """A stored image file, served as its own type (PNG, JPEG or WebP only: the proxy decoded each before it
        stored it), never sniffed as anything else."""
        sha = request.path_params["sha256"]
        found = self.store(request).images([sha]) if re.fullmatch(r"[0-9a-f]{64}", sha) else {}
        if sha not in found:
            return self._render(request, "missing.html", 404, what=f"image {sha[:64]!r}")
        image = found[sha]
        headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "private, max-age=86400"}
        return Response(image.data, media_type=image.mime, headers=headers)

    def rewards(self, request: Request) -> Response:
        """The reward versions (re-scorings): each one's function, selection, counts, and the episodes it scored
        otherwise than their clients."""
        store = self.store(request)
        rows = [(v, store.differing(v.version)) for v in store.reward_versions()]
        return self._render(request, "rewards.html", rows=rows)


def _final_answer(store: Store, uuid: str) -> str:
    calls = store.calls(uuid)
    return answer_text(calls[-1].response) if calls else ""


def _pretty(body: str) -> str:
    try:
        return json.dumps(json.loads(body), indent=1, ensure_ascii=False)[:20000]
    except ValueError:
        return body[:20000]


def _int(value: str) -> int:
    return int(value) if value.lstrip("-").isdigit() else -1


def _opt_int(value: Optional[str]) -> Optional[int]:
    return int(value) if value and value.lstrip("-").isdigit() else None


def _opt_float(value: Optional[str]) -> Optional[float]:
    try:
        x = float(value) if value else None
    except ValueError:
        return None
    return x if x is None or math.isfinite(x) else None
