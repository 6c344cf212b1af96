"""The wire protocol between the SDK and `ajet-proxy`, written once: headers, error codes, error body.

The proxy answers every control-API error with an `ErrorBody` whose `error` is an `ErrorCode`; the
SDK raises the exception of that code (`ajet.errors`), so two answers with the same status (a wrong
experiment state and an episode conflict are both 409) are told apart. Statuses and Retry-After hints
are defined here and nowhere else.
"""

from __future__ import annotations

from enum import Enum
from typing import Optional

from pydantic import Field

from ajet.types import AnswerModel, WireModel

CLIENT_HEADER = "X-Ajet-Client"
"""Names the client that sends a control call (episodes are owned by the client that began them)."""
SWARM_TOKEN_HEADER = "X-Swarm-Token"
"""Carries the swarm token on control calls (an `Authorization: Bearer` header works as well)."""
EXPERIMENT_HEADER = "X-Ajet-Experiment"
"""Names the experiment a control call acts on (`project_name/experiment_name` of its job); without it, the swarm's
default experiment."""
POLICY_VERSION_HEADER = "X-Ajet-Policy-Version"
"""Set by an inference engine on each answer: the policy version that produced it."""
JUDGE_MODEL = "judge"
"""The model name a LoRA job's frozen base is served under by every engine (the served judge, `ajet.judge`)."""


def bearer_token(authorization: str) -> str:
    """The token of an `Authorization: Bearer TOKEN` header value ("" when it is not a Bearer header)."""
    return authorization[7:].strip() if authorization[:7].lower() == "bearer " else ""


class ErrorCode(str, Enum):
    """What went wrong, by name; the SDK's exception classes carry the same names."""

    UNAUTHORIZED = "Unauthorized"
    FORBIDDEN = "Forbidden"
    EPISODE_NOT_FOUND = "EpisodeNotFound"
    EXPERIMENT_NOT_FOUND = "ExperimentNotFound"
    WRONG_STATE = "WrongState"
    EPISODE_CONFLICT = "EpisodeConflict"
    JOB_CONFLICT = "JobConflict"
    INVALID_REQUEST = "InvalidRequest"
    REQUEST_TOO_LARGE = "RequestTooLarge"
    NOT_READY = "NotReady"
    BOOT_FAILED = "BootFailed"
    TRAINER_UNRESPONSIVE = "TrainerUnresponsive"
    TRAINER_STOPPED = "TrainerStopped"
    ENGINE_UNAVAILABLE = "EngineUnavailable"
    STORE_ERROR = "StoreError"
    STORE_UNAVAILABLE = "StoreUnavailable"
    ROUTE_NOT_FOUND = "RouteNotFound"
    METHOD_NOT_ALLOWED = "MethodNotAllowed"
    MODEL_NOT_FOUND = "ModelNotFound"
    CONTEXT_LENGTH_EXCEEDED = "ContextLengthExceeded"
    INTERNAL_ERROR = "InternalError"

    @property
    def status(self) -> int:
        """The HTTP status this code is answered with."""
        return _STATUS[self]

    @property
    def retry_after(self) -> Optional[int]:
        """Seconds for a Retry-After header, for errors a client should retry (else None)."""
        return _RETRY_AFTER.get(self)


_STATUS = {
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.EPISODE_NOT_FOUND: 404,
    ErrorCode.EXPERIMENT_NOT_FOUND: 404,
    ErrorCode.WRONG_STATE: 409,
    ErrorCode.EPISODE_CONFLICT: 409,
    ErrorCode.JOB_CONFLICT: 409,
    ErrorCode.INVALID_REQUEST: 422,
    ErrorCode.REQUEST_TOO_LARGE: 413,
    ErrorCode.NOT_READY: 503,
    ErrorCode.BOOT_FAILED: 409,
    ErrorCode.TRAINER_UNRESPONSIVE: 503,
    ErrorCode.TRAINER_STOPPED: 503,
    ErrorCode.ENGINE_UNAVAILABLE: 503,
    ErrorCode.STORE_ERROR: 500,
    ErrorCode.STORE_UNAVAILABLE: 503,
    ErrorCode.ROUTE_NOT_FOUND: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.MODEL_NOT_FOUND: 404,
    ErrorCode.CONTEXT_LENGTH_EXCEEDED: 422,
    ErrorCode.INTERNAL_ERROR: 500,
}
_RETRY_AFTER = {
    ErrorCode.NOT_READY: 1,
    ErrorCode.ENGINE_UNAVAILABLE: 2,
    ErrorCode.STORE_UNAVAILABLE: 2,
    ErrorCode.TRAINER_UNRESPONSIVE: 2,
}


class ErrorBody(AnswerModel):
    """Body of every control-API error answer."""

    error: str
    """The `ErrorCode` value (e.g. `WrongState`, `InvalidRequest`); the SDK raises the exception of that name."""
    detail: str
    """A human-readable reason."""
    state: Optional[str] = None
    """The experiment's state, where the error depends on it (e.g. why `begin_episode` must wait)."""
    fields: list[str] = Field(default_factory=list)
    """The offending fields of a malformed body, as dotted paths."""


_OPENAI_STATUS = {ErrorCode.INVALID_REQUEST: 400, ErrorCode.CONTEXT_LENGTH_EXCEEDED: 400}
"""Where the data plane's status differs from the control API's: OpenAI answers a bad request 400."""
_OPENAI_TYPE = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    503: "server_error",
    500: "server_error",
}


def openai_status(code: ErrorCode) -> int:
    """The HTTP status of `code` on the OpenAI-compatible routes (`/v1/*`)."""
    return _OPENAI_STATUS.get(code, code.status)


class OpenAIError(WireModel):
    """The inside of an OpenAI error object, as the openai SDK parses it into its exception."""

    message: str
    """The human-readable reason (what agent frameworks print)."""
    type: str
    """OpenAI's error type: `invalid_request_error` for the client's fault, `server_error` otherwise."""
    param: Optional[str] = None
    """The offending request field as a dotted path (e.g. `temperature`, `messages.0.content`)."""
    code: Optional[str] = None
    """`invalid_api_key` for a bad episode key; otherwise the `ErrorCode` value (e.g. `NotReady`)."""


class OpenAIErrorBody(WireModel):
    """Body of every error answer on `/v1/*`."""

    error: OpenAIError
    """The error object."""


_OPENAI_CODE = {
    ErrorCode.UNAUTHORIZED: "invalid_api_key",
    ErrorCode.MODEL_NOT_FOUND: "model_not_found",
    ErrorCode.CONTEXT_LENGTH_EXCEEDED: "context_length_exceeded",
}
"""Where OpenAI has a code of its own for one of ours."""


def openai_error_body(code: ErrorCode, message: str, param: Optional[str] = None) -> OpenAIErrorBody:
    """The OpenAI-shaped answer to an error of `code`."""
    wire_code = _OPENAI_CODE.get(code, code.value)
    return OpenAIErrorBody(
        error=OpenAIError(
            message=message, type=_OPENAI_TYPE.get(openai_status(code), "server_error"), param=param, code=wire_code
        )
    )


_ANTHROPIC_TYPE = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "request_too_large",
    500: "api_error",
    503: "overloaded_error",
}


class AnthropicError(WireModel):
    """The inside of an Anthropic error answer, as the anthropic SDK parses it into its exception."""

    type: str
    """Anthropic's error type: `invalid_request_error`, `authentication_error`, `not_found_error`,
    `overloaded_error` (retry later) or `api_error`."""
    message: str
    """The human-readable reason; for a bad field it starts with the field's dotted path."""


class AnthropicErrorBody(WireModel):
    """Body of every error answer on `/v1/messages` (Anthropic's Messages API)."""

    type: str = "error"
    """Always `error`."""
    error: AnthropicError
    """The error."""


def anthropic_error_body(code: ErrorCode, message: str) -> AnthropicErrorBody:
    """The Anthropic-shaped answer to an error of `code` (same status as on the OpenAI routes)."""
    return AnthropicErrorBody(
        error=AnthropicError(type=_ANTHROPIC_TYPE.get(openai_status(code), "api_error"), message=message)
    )
