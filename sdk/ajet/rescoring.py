"""Re-scoring stored episodes: a reward function applied after the fact, to what the store kept.

A reward function takes a `StoredEpisode` (the task, the conversation, the tool calls, the final answer and the
metadata the client ended the episode with) and returns a reward: a number, or a `WorkflowOutput` with a reward
and optionally `is_success`. `stored_episode` rebuilds that view from an episode's logged calls (pure: the
request and answer bodies as the proxy logged them, in any of its APIs' shapes). `load_reward_function` finds a
function by `module:function`; `source_hash` names its code, so the same name with other code is another reward
version. `score` calls it on one episode and turns whatever it raises into that episode's error.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import math
from typing import Any, Callable, Optional, Protocol, Sequence, Union

from ajet.errors import ConfigError
from ajet.rescore_types import (
    EpisodeScore,
    EpisodeSelection,
    RewardVersionRequest,
    ScoresRequest,
    StoredEpisode,
)
from ajet.types import Task, WorkflowOutput

RewardFunction = Callable[[StoredEpisode], Union[float, WorkflowOutput]]
"""What a re-scoring calls on each stored episode."""


class LoggedCall(Protocol):
    """What re-scoring reads of a logged call (`ajet_store.CallRecord` has it)."""

    @property
    def request(self) -> str: ...

    @property
    def response(self) -> Optional[str]: ...

    @property
    def error(self) -> Optional[str]: ...


def stored_episode(
    uuid: str, meta: dict[str, Any], reward: Optional[float], is_success: Optional[bool], calls: Sequence[LoggedCall]
) -> StoredEpisode:
    """The reward function's view of an ended episode: `meta` is the episode's stored metadata (the task and the
    workflow metadata `end_episode` stored), `calls` its logged calls in order."""
    answered = [(c, _answer_message(c.response)) for c in calls if c.error is None and c.response]
    answered = [(c, m) for c, m in answered if m is not None]
    messages: list[dict[str, Any]] = []
    final = ""
    if answered:
        last, message = answered[-1]
        messages = [*request_messages(last.request), message]
        final = message.get("content") or ""
    return StoredEpisode(
        episode_uuid=uuid,
        task=Task.model_validate(meta.get("task") or {"task_id": "unknown"}),
        messages=messages,
        tool_calls=[call for _, m in answered for call in _tool_calls(m)],
        final_answer=final if isinstance(final, str) else json.dumps(final),
        metadata=meta.get("workflow") or {},
        reward=reward,
        is_success=is_success,
    )


def request_messages(request: str) -> list[dict[str, Any]]:
    """The conversation a logged request sent: chat and Anthropic `messages` (Anthropic's `system` first), or a
    Responses request's `instructions` and `input` as chat messages; [] for a body that is none of them."""
    try:
        body = json.loads(request)
    except ValueError:
        return []
    if not isinstance(body, dict):
        return []
    if isinstance(body.get("messages"), list):
        system = body.get("system")
        head = [{"role": "system", "content": system}] if system else []
        return head + [m for m in body["messages"] if isinstance(m, dict)]
    return _responses_messages(body)


def _responses_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A Responses request's `instructions` and `input` items as chat messages."""
    out: list[dict[str, Any]] = []
    if body.get("instructions"):
        out.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        return [*out, {"role": "user", "content": items}]
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name"), "arguments": item.get("arguments")}}  # fmt: skip
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif item.get("type") == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": item.get("output")})
        elif "role" in item:
            out.append({"role": item["role"], "content": item.get("content")})
    return out


def _answer_message(response: Optional[str]) -> Optional[dict[str, Any]]:
    """The assistant message of a logged (chat-shaped) answer, or None."""
    try:
        choices = json.loads(response or "").get("choices") or []
    except (ValueError, AttributeError):
        return None
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    return message if isinstance(message, dict) else None


def _tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """An answer's tool calls as `{"name", "arguments"}`, arguments parsed where they are JSON."""
    out = []
    for call in message.get("tool_calls") or []:
        fn = (call.get("function") or {}) if isinstance(call, dict) else {}
        args = fn.get("arguments")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            pass
        out.append({"name": fn.get("name"), "arguments": args})
    return out


def load_reward_function(spec: str) -> RewardFunction:
    """The function `module:function` names (`ConfigError` saying what is wrong otherwise)."""
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise ConfigError(f"--reward {spec!r}: give it as module:function (e.g. my_rewards:exact_match)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--reward {spec!r}: cannot import {module_name!r} ({exc})") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"--reward {spec!r}: {module_name!r} has no function {name!r}")
    return fn


def source_hash(fn: Callable[..., Any]) -> str:
    """sha256 of the function's source (of its module's, when the source cannot be read alone)."""
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        module = inspect.getmodule(fn)
        source = inspect.getsource(module) if module is not None else repr(fn)
    return hashlib.sha256(source.encode()).hexdigest()


def score(fn: RewardFunction, episode: StoredEpisode) -> tuple[Optional[float], Optional[bool], Optional[str]]:
    """(reward, is_success, error) of one episode: the function's answer, or what it raised (or returned that is
    not a finite reward) as the error, so one bad episode never stops a re-scoring."""
    try:
        out = fn(episode)
    except Exception as exc:  # noqa: BLE001 - the user's function: its failure is this episode's, recorded
        return None, None, f"{type(exc).__name__}: {exc}"
    reward, success = (out.reward, out.is_success) if isinstance(out, WorkflowOutput) else (out, None)
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        return None, None, f"the reward function returned {reward!r}, not a finite number"
    return float(reward), success, None


def function_name(fn: Callable[..., Any]) -> str:
    """A function's `module:function` name (how a reward version names it)."""
    return f"{fn.__module__}:{fn.__qualname__}"


def version_request(fn: RewardFunction, selection: Optional[EpisodeSelection] = None) -> RewardVersionRequest:
    """The request that finds (or begins) `fn`'s reward version over `selection` (default: every training episode)."""
    return RewardVersionRequest(
        function=function_name(fn), source_hash=source_hash(fn), selection=selection or EpisodeSelection()
    )


def scores_request(version: int, fn: RewardFunction, episodes: Sequence[StoredEpisode]) -> ScoresRequest:
    """A page of episodes scored by `fn` (an error is that episode's), as the request that stores them."""
    scores = []
    for ep in episodes:
        reward, success, error = score(fn, ep)
        scores.append(EpisodeScore(episode_uuid=ep.episode_uuid, reward=reward, is_success=success, error=error))
    return ScoresRequest(version=version, scores=scores)
