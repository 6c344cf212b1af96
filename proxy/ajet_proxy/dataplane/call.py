"""`InFlightCall`: one call on the chat path, and everything that changes while it is served.

It owns the call's number, its prompt's label and the turn it continues, the prompt-limit check (made once, where
the prompt's ids are first known: before sending a token prompt, or in the engine's answer when the engine
rendered the messages), its log record, and what it leaves behind: the episode's activity (`finish`) and, once
committed, its turn in the episode's history (`remember`).
"""

from __future__ import annotations

import time
from typing import Callable, Optional, cast

from starlette.requests import Request

from ajet.errors import ContextLengthExceeded
from ajet.job import AgentJetJob
from ajet_core.chat_request import ChatCompletionRequest, prompt_over_job
from ajet_core.engine_answer import EngineAnswer
from ajet_core.labels import Label
from ajet_proxy.dataplane.shape import ApiShape
from ajet_proxy.dataplane.types import ChatBody
from ajet_proxy.open_episodes import OpenEpisode
from ajet_store.types import CallImage, CallRecord, RegisteredEngine
from ajet_token_history.planner import Plan
from ajet_token_history.rules import answer_message, new_turn
from ajet_token_history.turn_boundary import ended_on_token

CLIENT_GONE_STREAM = "the client disconnected before [DONE]"
"""The error of a stream whose client left before its end."""
CLIENT_GONE_PLAIN = "the client disconnected before the answer"
"""The error of a plain call whose client's connection closed before its answer was committed."""


def call_images(hashes: tuple[str, ...], grids: Optional[list[list[int]]]) -> Optional[tuple[CallImage, ...]]:
    """A call's images as logged: each hash with the grid the engine said it made of it (None where it said none)."""
    if not hashes:
        return None
    known = grids if grids is not None and len(grids) == len(hashes) else [None] * len(hashes)
    return tuple(CallImage(h, (g[0], g[1], g[2]) if g else None) for h, g in zip(hashes, known))


def chat_body(validated: ChatCompletionRequest) -> ChatBody:
    """The body `validated` was validated from, as the data plane's chat body type."""
    return cast(ChatBody, validated.sent)  # validated: its fields are of the types ChatBody says


class InFlightCall:
    """One call being served for `ep`: `raw` is the request as logged, `body` the chat body sent to the engine (less
    what `engine_body` adds), `validated` that body as its model (the settings are read from it)."""

    def __init__(
        self,
        ep: OpenEpisode,
        raw: bytes,
        validated: ChatCompletionRequest,
        shape: ApiShape,
        request: Optional[Request],
        instructions_first: bool = False,
        images: tuple[str, ...] = (),
    ):
        self.ep, self.raw, self.validated = ep, raw, validated
        self.body = chat_body(validated)
        """The validated request's body as the client sent it (vendor fields intact): what goes to the engine."""
        self.images = images
        """Its prompt's image files, by hash, in rendering order (stored before it is sent: `dataplane.images`)."""
        self.shape, self.request = shape, request
        self.instructions_first = instructions_first
        """A Responses call whose first message is the request's instructions."""
        self.t0 = time.perf_counter()
        self.stream = bool(validated.stream)
        self.seq = -1
        """Its number in the episode, taken as it goes to an engine (-1 until then)."""
        self.prompt: Optional[Plan] = None
        """How its prompt was built, once it was."""
        self.engine: Optional[RegisteredEngine] = None
        """The engine it was sent to (the one that tokenized its token prompt)."""
        self.prompt_checked = False
        """Its prompt's length was held to the job's limit (once, when its ids were first known)."""
        self._done = False
        self.admitted: Optional[Callable[[], None]] = None
        """Gives the call's place at the engines back (`CallGate.leave`), once it was let in."""
        ep.call_started()

    def refusal(self, job: Optional[AgentJetJob], prompt_ids: Optional[list[int]]) -> Optional[ContextLengthExceeded]:
        """The refusal of a prompt over the job's `max_prompt_length` (what the trainer would cut), the first time
        the call's prompt ids are known; None when they fit, are not known, or were checked already."""
        if self.prompt_checked or prompt_ids is None:
            return None
        self.prompt_checked = True
        if job is None or len(prompt_ids) <= job.max_prompt_length:
            return None
        return ContextLengthExceeded(prompt_over_job(len(prompt_ids), job.max_prompt_length), fields=["messages"])

    def record(
        self,
        response: Optional[str],
        answer: EngineAnswer,
        version: int,
        error: Optional[str] = None,
        gone: bool = False,
    ) -> CallRecord:
        """The call's log record: the engine's answer (`response` as received, read as `answer`) or why there is
        none (`answer` then holds at most the prompt's ids)."""
        engine, prompt, choice = self.engine, self.prompt, answer.first
        extends = prompt.extends if prompt is not None and prompt.label == Label.EXTENDED else None
        return CallRecord(
            episode_uuid=self.ep.uuid,
            seq=self.seq,
            request=self.raw.decode(errors="replace"),
            response=response,
            prompt_ids=answer.prompt_ids,
            completion_ids=answer.completion_ids,
            logprobs=answer.logprobs,
            finish_reason=choice.finish_reason,
            policy_version=version,
            engine=engine.name if engine else None,
            latency_ms=(time.perf_counter() - self.t0) * 1000.0,
            created_at=time.time(),
            stream=self.stream,
            error=error,
            token_history=prompt.label if prompt is not None else None,
            parent_seq=extends.parent.seq if extends is not None else None,
            response_id=self.shape.response_id,
            truncated=error is None and self.validated.cut_by_server(choice.finish_reason, len(choice.token_ids or ())),
            client_gone=gone,
            version_spans=answer.policy_version_spans,
            images=call_images(self.images, answer.image_grids),
        )

    def remember(self, record: CallRecord, answer: EngineAnswer) -> None:
        """After the call is committed: its number is accounted for, and a trainable `answer` (its content and
        tool calls) becomes a turn later calls of the episode may continue."""
        if not record.trainable:
            self.ep.history.seen(record.seq)
            return
        assert record.prompt_ids is not None and record.completion_ids is not None
        choice = answer.first
        message = answer_message(choice.message.content, choice.message.tool_call_dicts())
        turn = new_turn(
            record.seq,
            self.body,
            record.prompt_ids,
            record.completion_ids,
            message,
            self.shape.response_id,
            self.instructions_first,
            ended_on_token(choice.finish_reason, choice.stop_reason),
        )
        if turn is None:  # ids no later call can continue
            self.ep.history.seen(record.seq)
            return
        prompt = self.prompt
        self.ep.history.add(turn, prompt.extends if prompt is not None and prompt.label == Label.EXTENDED else None)

    def forget(self) -> None:
        """A numbered call that left no answer (refused, failed, cut off): its number is accounted for."""
        if self.seq >= 0:
            self.ep.history.seen(self.seq)

    async def client_gone(self) -> bool:
        """Whether the client's connection has closed (False when the call has no request to ask)."""
        return self.request is not None and await self.request.is_disconnected()

    def finish(self) -> None:
        """The call is over (answered, refused or cut off): the episode's activity is updated once."""
        if not self._done:
            self._done = True
            self.ep.call_finished(time.time())
        leave, self.admitted = self.admitted, None
        if leave is not None:
            leave()
