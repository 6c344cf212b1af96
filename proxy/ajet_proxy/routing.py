"""Routing of agent calls to policy deployments, through a `litellm.Router`.

The trainer registers deployments in the store; `PolicyRouter.load` turns them into a LiteLLM
Router. Every deployment appears twice in its model list: in the group `policy` (LiteLLM picks a
deployment of the group once per episode; the episode then sticks to it for prefix-cache reuse) and
under its own name (so the LiteLLM send path can target the sticky deployment). A deployment that
fails to connect cools down and the episode fails over to another one. Policy models are registered
with zero cost so LiteLLM spends no time pricing them.

The Router is built only when something will ask it: more than one deployment to choose from, or the
LiteLLM send path (`always_build`). One deployment (the embedded engine, one vLLM replica) needs no choice,
and importing LiteLLM costs a proxy ~5 s of CPU at start; it is imported on the first load that needs it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterable, Optional

from ajet_proxy.errors import UpstreamUnavailable
from ajet_store.types import Deployment

logger = logging.getLogger(__name__)

POLICY_GROUP = "policy"
COOLDOWN_S = 10.0


def litellm_model_name(dep: Deployment) -> str:
    """The LiteLLM model string of a deployment (OpenAI-compatible provider keeps token ids)."""
    return f"openai/{dep.model}"


def _register_zero_cost(models: Iterable[str]) -> None:
    import litellm

    zero = {
        "input_cost_per_token": 0.0,
        "output_cost_per_token": 0.0,
        "cache_creation_input_token_cost": 0.0,
        "cache_read_input_token_cost": 0.0,
        "litellm_provider": "openai",
        "mode": "chat",
    }
    litellm.register_model({m: dict(zero) for m in models})


def build_model_list(deps: Iterable[Deployment]) -> list[dict[str, Any]]:
    """LiteLLM Router model list: each deployment in the `policy` group and under its own name."""
    out = []
    for d in deps:
        params = {"model": litellm_model_name(d), "api_base": d.base_url, "api_key": d.api_key or "ajet-internal"}
        out.append({"model_name": POLICY_GROUP, "litellm_params": dict(params), "model_info": {"id": d.name}})
        out.append({"model_name": d.name, "litellm_params": dict(params), "model_info": {"id": f"{d.name}#direct"}})
    return out


class PolicyRouter:
    """Holds the deployments and the LiteLLM Router built from them."""

    def __init__(self, cooldown_s: float = COOLDOWN_S, always_build: bool = False):
        self.cooldown_s = cooldown_s
        self.always_build = always_build
        """Build the LiteLLM Router for any deployment (the LiteLLM send path calls through it)."""
        self.deployments: dict[str, Deployment] = {}
        self.version = -1
        self.router: Any = None
        self._cooling: dict[str, float] = {}
        self._lock = threading.Lock()

    def load(self, deps: list[Deployment], version: int) -> None:
        """Replace the deployments (called when the store's deployments version changes).

        Several threads may load at once (the engine poll, a control route's refresh): the LiteLLM Router is
        built first, then deployments, version and router are swapped together, and never for an older
        version than the one held (a slow load of an old version must not overwrite a newer one). The first
        load that needs a Router imports LiteLLM (seconds): the event loop calls this in a thread."""
        router = None
        if len(deps) > 1 or (deps and self.always_build):
            import litellm

            _register_zero_cost({litellm_model_name(d) for d in deps})
            router = litellm.Router(model_list=build_model_list(deps), num_retries=0)
        with self._lock:
            if version < self.version:
                return
            self.deployments = {d.name: d for d in deps}
            self.version = version
            self.router = router
            self._cooling = {n: t for n, t in self._cooling.items() if n in self.deployments}
        logger.info(
            "deployments v%d: %s", version, ", ".join(f"{d.name}->{d.base_url} ({d.model})" for d in deps) or "none"
        )

    def alive(self, name: Optional[str]) -> bool:
        """Registered and not cooling down."""
        return name in self.deployments and self._cooling.get(name, 0.0) <= time.monotonic()

    def pick(self, sticky: Optional[str] = None, exclude: Iterable[str] = ()) -> Deployment:
        """The episode's deployment: its sticky one while alive, else one LiteLLM picks from the group."""
        if sticky is not None and sticky not in exclude and self.alive(sticky):
            return self.deployments[sticky]
        if not self.deployments:
            raise UpstreamUnavailable("no policy deployment is registered (is the trainer running?)")
        excluded = set(exclude)
        candidates = [n for n in self.deployments if n not in excluded and self.alive(n)]
        if not candidates:
            candidates = [n for n in self.deployments if n not in excluded]  # all cooling: try anyway
        if not candidates:
            raise UpstreamUnavailable("every policy deployment failed for this call")
        if len(candidates) == 1:
            return self.deployments[candidates[0]]
        choice = self.router.get_available_deployment(model=POLICY_GROUP)
        name = (choice.get("model_info") or {}).get("id")
        return self.deployments[name if name in candidates else candidates[0]]

    def mark_failed(self, name: str) -> None:
        """Cool a deployment down after a connection failure."""
        self._cooling[name] = time.monotonic() + self.cooldown_s
        logger.warning("deployment %s failed; cooling down for %.0fs", name, self.cooldown_s)
