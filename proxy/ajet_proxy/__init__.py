"""AgentJet Swarm proxy: episode keys, LiteLLM routing, token-exact call logging, the control API.

The store it writes (`ajet_store`) is its own package: the contract between proxy and trainer.
"""

from ajet_proxy.errors import EngineNotReady, InvalidRequest, ProxyError, Unauthorized, UpstreamUnavailable, http_error

__all__ = [
    "EngineNotReady",
    "InvalidRequest",
    "ProxyError",
    "Unauthorized",
    "UpstreamUnavailable",
    "create_app",
    "http_error",
]


def __getattr__(name: str) -> object:  # create_app imports FastAPI and LiteLLM: load it only when asked
    if name == "create_app":
        from ajet_proxy.app import create_app

        return create_app
    raise AttributeError(name)
