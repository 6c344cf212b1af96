"""How a client's operation runs: written once, as steps, and run blocking or awaited.

Every method of the swarm's clients is an *operation*: a generator that yields the steps it needs (a `Request` to the
proxy, a `Sleep` between tries) and returns the method's answer; it never touches a socket or a clock. A transport
error is thrown back into it at its `Request`, so retries, waits and typed errors are the operation's own. The
`SwarmClient` runs operations with `httpx.Client` and `time.sleep` (`SyncRunner`), the `AsyncSwarmClient` with
`httpx.AsyncClient` and `asyncio.sleep` (`AsyncRunner`): each method is declared once (`ajet.client_surface`) and
offered by both, blocking on one and as a coroutine on the other (`operation`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, Optional, ParamSpec, TypeVar, Union, overload

import httpx

from ajet.errors import InvalidRequest

TRANSPORT_ERRORS = (httpx.TransportError, httpx.TimeoutException)
"""What a request raises when the proxy could not be reached or did not answer in time (thrown into the operation)."""


@dataclass(frozen=True)
class Request:
    """A step: one HTTP request to the proxy; the operation is sent its `httpx.Response`."""

    method: str
    """`GET` or `POST`."""
    path: str
    """Under the proxy's base URL (`/swarm/<route>`)."""
    content: Optional[bytes]
    """The JSON body's bytes (`json_request`; None: no body)."""
    headers: dict[str, str]
    """Headers beside the client's own (the experiment's, a kept request's client, the body's type)."""


def json_request(method: str, path: str, body: Any, headers: dict[str, str]) -> Request:
    """A request of `body` as the JSON text of what was given: UTF-8, or, where a string holds a lone UTF-16
    surrogate (which no UTF-8 text holds), JSON's ASCII escapes, which the proxy reads back as the same string. A
    non-finite number is `InvalidRequest` (JSON has none)."""
    if body is None:
        return Request(method, path, None, headers)
    try:
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode("ascii")
    except ValueError as exc:
        raise InvalidRequest.for_field("body", f"{exc} (refused before it was sent)") from None
    return Request(method, path, data, {**headers, "Content-Type": "application/json"})


@dataclass(frozen=True)
class Sleep:
    """A step: wait this many seconds before going on."""

    seconds: float


Step = Union[Request, Sleep]
R = TypeVar("R")
P = ParamSpec("P")
Op = Generator[Step, Any, R]
"""An operation: yields steps, is sent each request's response, returns the answer of type R."""


@dataclass(frozen=True)
class Done(Generic[R]):
    """An operation's end: its answer."""

    answer: R


def advance(op: Op[R], reply: Any, error: Optional[BaseException]) -> Union[Step, Done[R]]:
    """The operation's next step, after sending it the last request's response (or throwing its transport error
    into it); `Done` once it returned."""
    try:
        return op.send(reply) if error is None else op.throw(error)
    except StopIteration as done:
        return Done(done.value)


class SyncRunner:
    """Runs operations blocking (`SwarmClient`)."""

    _http: httpx.Client

    def _run(self, op: Op[R]) -> R:
        """Run an operation to its answer."""
        step = advance(op, None, None)
        while not isinstance(step, Done):
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                reply, error = None, None
            else:
                reply, error = self._send(step)
            step = advance(op, reply, error)
        return step.answer

    def _send(self, req: Request) -> tuple[Optional[httpx.Response], Optional[BaseException]]:
        try:
            return self._http.request(req.method, req.path, content=req.content, headers=req.headers), None
        except TRANSPORT_ERRORS as exc:
            return None, exc

    def _bind(self, fn: Callable[..., Op[R]]) -> Callable[..., R]:
        """`fn` as a method of this client that blocks until its answer."""

        def method(*args: Any, **kwargs: Any) -> R:
            return self._run(fn(self, *args, **kwargs))

        return _dressed(method, fn)


class AsyncRunner:
    """Runs operations as coroutines (`AsyncSwarmClient`)."""

    @property
    def _http(self) -> httpx.AsyncClient:
        raise NotImplementedError

    async def _run(self, op: Op[R]) -> R:
        """Run an operation to its answer, each wait yielding to the loop."""
        step = advance(op, None, None)
        while not isinstance(step, Done):
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
                reply, error = None, None
            else:
                reply, error = await self._send(step)
            step = advance(op, reply, error)
        return step.answer

    async def _send(self, req: Request) -> tuple[Optional[httpx.Response], Optional[BaseException]]:
        try:
            return await self._http.request(req.method, req.path, content=req.content, headers=req.headers), None
        except TRANSPORT_ERRORS as exc:
            return None, exc

    def _bind(self, fn: Callable[..., Op[R]]) -> Callable[..., Awaitable[R]]:
        """`fn` as a coroutine method of this client."""

        async def method(*args: Any, **kwargs: Any) -> R:
            return await self._run(fn(self, *args, **kwargs))

        return _dressed(method, fn)


def _dressed(method: Callable[..., Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """`method` with `fn`'s name, docstring and signature (without `self`), for `help()` and `inspect`."""
    functools.update_wrapper(method, fn)
    params = list(inspect.signature(fn).parameters.values())[1:]
    vars(method)["__signature__"] = inspect.signature(fn).replace(parameters=params)  # what `inspect` reads first
    return method


class operation(Generic[P, R]):
    """Marks a client method written as an operation; on a `SwarmClient` it blocks, on an `AsyncSwarmClient` it is
    a coroutine, with the same name, arguments, answer and docstring."""

    def __init__(self, fn: Callable[Concatenate[Any, P], Op[R]]):
        self.fn = fn
        self.__doc__, self.__name__ = fn.__doc__, fn.__name__

    @overload
    def __get__(self, obj: None, owner: type) -> "operation[P, R]": ...
    @overload
    def __get__(self, obj: SyncRunner, owner: type) -> Callable[P, R]: ...
    @overload
    def __get__(self, obj: AsyncRunner, owner: type) -> Callable[P, Awaitable[R]]: ...
    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        bound = obj._bind(self.fn)
        vars(obj)[self.__name__] = bound  # bound once per client: later lookups find it before this descriptor
        return bound
