"""The API description, generated from the typed models every API folder owns: `/openapi.json` says what the
models validate, so it matches the answers (schemathesis checks both in CI).

The data plane's routes read their bodies raw (to log them byte for byte and to forward vendor fields), so FastAPI
does not see their request models: a route names its model with `request_body(Model)`, and `DescribedApp` puts
every named model's JSON schema into the description's components. Error answers are documented by the error body of
the route's API (`errors_of`).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from ajet.protocol import AnthropicErrorBody, ErrorBody, OpenAIErrorBody

REF = "#/components/schemas/{model}"
"""Where a model's schema is referenced from."""

_NAMED: dict[str, type[BaseModel]] = {}
"""Every model a route names for its body or its answer, by its schema name."""

ERROR_DESCRIPTIONS: dict[int, str] = {
    400: "Invalid request; the field is named (`param`)",
    401: "Unknown, ended or expired episode key, or a wrong swarm token",
    404: "Unknown episode, route or model",
    409: "Wrong experiment state or episode status (`WrongState`, `EpisodeConflict`)",
    413: "Body over the proxy's size limit (`RequestTooLarge`)",
    422: "Malformed body; `fields` names the offending fields (`InvalidRequest`)",
    500: "The store failed (`StoreError`)",
    503: "Not now: the experiment is not ROLLING, or no engine answers (with Retry-After)",
}
"""What each error status means, for every API (each answers it in its own error shape)."""


def ref(model: type[BaseModel]) -> dict[str, str]:
    """A reference to `model`'s schema (which `DescribedApp` publishes)."""
    _NAMED[model.__name__] = model
    return {"$ref": REF.format(model=model.__name__)}


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """A route's `openapi_extra` documenting its JSON body as `model`."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref(model)}}}}


def answer(model: type[BaseModel], description: str, stream: str = "") -> dict[str, Any]:
    """The 200 answer of a route: JSON of `model`, and (`stream`: what its events are) a server-sent event stream."""
    content: dict[str, Any] = {"application/json": {"schema": ref(model)}}
    if stream:
        event = {
            "type": "object",
            "description": stream,
            "properties": {"event": {"type": "string"}, "data": {"type": "string"}},
        }
        content["text/event-stream"] = {"schema": event}
    return {"200": {"description": description, "content": content}}


def errors_of(body: type[BaseModel], statuses: tuple[int, ...]) -> dict[int | str, dict[str, Any]]:
    """A route's error answers (`responses=`): each status, answered as `body`."""
    return {status: {"model": body, "description": ERROR_DESCRIPTIONS[status]} for status in statuses}


CONTROL_ERRORS = errors_of(ErrorBody, (401, 404, 409, 413, 422, 500, 503))
"""Error answers of every `/swarm/*` route: an `ErrorBody` (FastAPI's own validation shape is never sent)."""
OPENAI_ERRORS = errors_of(OpenAIErrorBody, (400, 401, 413, 500, 503))
"""Error answers of the OpenAI routes (chat completions, models, Responses): OpenAI's error object."""
ANTHROPIC_ERRORS = errors_of(AnthropicErrorBody, (400, 401, 413, 500, 503))
"""Error answers of the Messages routes: Anthropic's error object."""


class DescribedApp(FastAPI):
    """A FastAPI app whose description carries the schemas of every model its routes named."""

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            spec = super().openapi()
            schemas = spec.setdefault("components", {}).setdefault("schemas", {})
            for name, model in sorted(_NAMED.items()):
                schema = model.model_json_schema(ref_template=REF)
                schemas.update(schema.pop("$defs", {}))
                schemas[name] = schema
            self.openapi_schema = spec
        return self.openapi_schema
