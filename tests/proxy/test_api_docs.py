"""`/openapi.json` is generated from the typed models each API folder owns (no description is written by hand): every
route's body and answer point at its model, whose schema is the model's own; and the answers the proxy really
gives validate against those models."""

import httpx
import openai
import pytest
from pydantic import BaseModel

from ajet_core.chat_request import ChatCompletionRequest
from ajet_proxy.api_docs import REF
from ajet_proxy.dataplane.chat.protocol import ChatCompletion, ModelList
from ajet_proxy.dataplane.messages.protocol import CountTokensRequest, MessageObject, MessagesRequest
from ajet_proxy.dataplane.responses.protocol import ResponseObject, ResponsesRequest

ROUTES = [
    ("/v1/chat/completions", ChatCompletionRequest, ChatCompletion),
    ("/v1/responses", ResponsesRequest, ResponseObject),
    ("/v1/messages", MessagesRequest, MessageObject),
    ("/v1/messages/count_tokens", CountTokensRequest, None),
]


@pytest.fixture(scope="module")
def spec(swarm):
    return httpx.get(swarm.proxy.url + "/openapi.json").json()


@pytest.mark.parametrize("path,body,answer", ROUTES, ids=[r[0] for r in ROUTES])
def test_each_route_is_described_by_its_models(spec, path, body, answer):
    post = spec["paths"][path]["post"]
    ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert ref == REF.format(model=body.__name__)
    schemas = spec["components"]["schemas"]
    own = body.model_json_schema(ref_template=REF)
    own.pop("$defs", None)
    assert schemas[body.__name__] == own
    if answer is not None:
        answered = post["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        assert answered == REF.format(model=answer.__name__) and answer.__name__ in schemas
    assert {"400", "401", "503"} <= set(post["responses"])


def test_no_route_documents_fastapis_own_validation_shape(spec):
    assert "HTTPValidationError" not in spec["components"]["schemas"]


def _valid(model: type[BaseModel], data: dict) -> None:
    model.model_validate(data)  # raises, naming what the answer lacks


def test_real_answers_fit_their_models(swarm):
    uuid, creds = swarm.client.begin_episode()
    headers = {"Authorization": f"Bearer {creds.api_key}"}
    url = creds.base_url
    swarm.answer("hello", "there", "friend")
    chat = httpx.post(
        url + "/chat/completions", headers=headers, json={"messages": [{"role": "user", "content": "hi"}]}
    )
    _valid(ChatCompletion, chat.json())
    resp = httpx.post(url + "/responses", headers=headers, json={"input": "hi"})
    _valid(ResponseObject, resp.json())
    msg = httpx.post(
        url + "/messages", headers=headers, json={"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    )
    _valid(MessageObject, msg.json())
    _valid(ModelList, openai.OpenAI(base_url=url, api_key=creds.api_key).models.list().model_dump())
    swarm.client.abort_episode(uuid)
