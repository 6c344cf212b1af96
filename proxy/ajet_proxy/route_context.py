"""What a control route acts on: the swarm (`Proxy`) the app serves, and the experiment a call names."""

from __future__ import annotations

import asyncio

from fastapi import Request

from ajet.protocol import EXPERIMENT_HEADER
from ajet_proxy.experiment_host import ExperimentHost
from ajet_proxy.proxy import Proxy


def proxy_of(request: Request) -> Proxy:
    """The proxy the app serves (this process's view of the swarm)."""
    proxy: Proxy = request.app.state.ajet
    return proxy


def host_of(request: Request) -> ExperimentHost:
    """The experiment a control call acts on: the one its `X-Ajet-Experiment` header names, else the swarm's default
    (404 `ExperimentNotFound` for a name the swarm does not have); a sync acts on its job's (`Proxy.host_for_job`)."""
    return proxy_of(request).host_named(request.headers.get(EXPERIMENT_HEADER))


async def host_in_loop(request: Request) -> ExperimentHost:
    """`host_of` for a route on the event loop: an experiment this proxy serves already is a lookup; one it has not
    taken up yet (a store read) is looked up off the loop."""
    proxy, name = proxy_of(request), request.headers.get(EXPERIMENT_HEADER)
    return proxy.known_host(name) or await asyncio.to_thread(proxy.host_named, name)
