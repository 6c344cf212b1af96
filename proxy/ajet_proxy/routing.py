"""Routing of agent calls to the engines.

The trainer registers engines in the store; `EngineRouter.load` holds them. An episode's first call picks its
engine, the live engines taking new episodes in turn (round robin: sequential episodes spread evenly, where
LiteLLM's random shuffle once put eight in a row on one engine); the episode then sticks to it for prefix-cache
reuse. An engine that fails to connect cools down and the episode fails over to another one.

For the LiteLLM transport (`always_build`) the engines are also a `litellm.Router` listing each under its own name
(the transport targets an episode's engine), policy models registered with zero cost so LiteLLM spends no time
pricing them. Only then is LiteLLM imported: it costs a proxy ~5 s of CPU at start, and picking needs none of it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterable, Optional

from ajet.errors import EngineUnavailable
from ajet_store.types import RegisteredEngine

logger = logging.getLogger(__name__)

COOLDOWN_S = 10.0


def litellm_model_name(engine: RegisteredEngine) -> str:
    """The LiteLLM model string of an engine (OpenAI-compatible provider keeps token ids)."""
    return f"openai/{engine.model}"


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


def build_model_list(engines: Iterable[RegisteredEngine]) -> list[dict[str, Any]]:
    """LiteLLM Router model list: each engine under its own name."""
    return [
        {
            "model_name": d.name,
            "litellm_params": {"model": litellm_model_name(d), "api_base": d.base_url,
                               "api_key": d.api_key or "ajet-internal"},
            "model_info": {"id": d.name},
        }
        for d in engines
    ]  # fmt: skip


class EngineRouter:
    """Holds the registered engines and the LiteLLM Router built from them."""

    def __init__(self, cooldown_s: float = COOLDOWN_S, always_build: bool = False):
        self.cooldown_s = cooldown_s
        self.always_build = always_build
        """Build the LiteLLM Router for any engine (the LiteLLM transport calls through it)."""
        self.engines: dict[str, RegisteredEngine] = {}
        self.version = -1
        self.router: Any = None
        self._cooling: dict[str, float] = {}
        self._turn = -1
        """New episodes picked so far: the next takes the next live engine in turn."""
        self._lock = threading.Lock()

    def load(self, engines: list[RegisteredEngine], version: int) -> None:
        """Replace the engines (called when the store's engines version changes).

        Several threads may load at once (the engine poll, a control route's refresh): the LiteLLM Router is
        built first, then engines, version and router are swapped together, and never for an older
        version than the one held (a slow load of an old version must not overwrite a newer one). The first
        load that needs a Router imports LiteLLM (seconds): the event loop calls this in a thread."""
        router = None
        if engines and self.always_build:
            import litellm

            _register_zero_cost({litellm_model_name(d) for d in engines})
            router = litellm.Router(model_list=build_model_list(engines), num_retries=0)
        with self._lock:
            if version < self.version:
                return
            self.engines = {d.name: d for d in engines}
            self.version = version
            self.router = router
            self._cooling = {n: t for n, t in self._cooling.items() if n in self.engines}
        logger.info(
            "engines v%d: %s", version, ", ".join(f"{d.name}->{d.base_url} ({d.model})" for d in engines) or "none"
        )

    def alive(self, name: Optional[str]) -> bool:
        """Registered and not cooling down."""
        return name in self.engines and self._cooling.get(name, 0.0) <= time.monotonic()

    def pick(self, sticky: Optional[str] = None, exclude: Iterable[str] = ()) -> RegisteredEngine:
        """The episode's engine: its sticky one while alive, else the next live engine in turn."""
        if sticky is not None and sticky not in exclude and self.alive(sticky):
            return self.engines[sticky]
        if not self.engines:
            raise EngineUnavailable("no engine is registered (is the trainer running?)")
        excluded = set(exclude)
        candidates = [n for n in self.engines if n not in excluded and self.alive(n)]
        if not candidates:
            candidates = [n for n in self.engines if n not in excluded]  # all cooling: try anyway
        if not candidates:
            raise EngineUnavailable("every engine failed for this call")
        with self._lock:
            self._turn += 1
            turn = self._turn
        return self.engines[sorted(candidates)[turn % len(candidates)]]

    def untried(self, tried: Iterable[str]) -> bool:
        """Whether a registered engine is left that a call has not tried. `tried` may name engines no longer
        registered (the trainer withdrew a dead one while the call was at it): only the table now counts."""
        return bool(set(self.engines) - set(tried))

    def mark_failed(self, name: str, reason: str = "") -> None:
        """Cool an engine down after a connection failure (`reason`: what failed, logged)."""
        self._cooling[name] = time.monotonic() + self.cooldown_s
        logger.warning("engine %s failed (%s); cooling down for %.0fs", name, reason or "no reason", self.cooldown_s)
