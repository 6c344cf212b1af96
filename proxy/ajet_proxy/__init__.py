"""AgentJet Swarm proxy: episode keys, routing to the engines, token-exact call logging, the control API.

The store it writes (`ajet_store`) is its own package: the contract between proxy and trainer. Its errors are the
SDK's one error tree (`ajet.errors`), answered in one place (`ajet_proxy.errors`).
"""

from ajet_proxy.errors import http_error

__all__ = ["create_app", "http_error"]


def __getattr__(name: str) -> object:  # create_app imports FastAPI and LiteLLM: load it only when asked
    if name == "create_app":
        from ajet_proxy.app import create_app

        return create_app
    raise AttributeError(name)
