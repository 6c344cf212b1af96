"""The agent frameworks, as their users run them, against a real proxy and a scripted embedded engine: the raw
openai SDK (sync, async, streaming, tools), the OpenAI Agents SDK (chat-completions model and its default
Responses model, `Runner.run` and `Runner.run_streamed`, a `@function_tool`), LangChain's `ChatOpenAI` (invoke,
stream, bind_tools, `use_responses_api=True`), LangGraph's prebuilt ReAct agent, and the anthropic SDK's
tool loop. Each test checks that its episode's calls are in the store with ids and logprobs, and that the
episode trains."""

import asyncio
import json

import httpx
import openai
import pytest

from ajet import Task, WorkflowOutput

CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
FINAL = "The sum is 5."
ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


@pytest.fixture()
def episode(swarm):
    uuid, creds = swarm.client.begin_episode()
    return uuid, creds


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


# ---------------------------------------------------------------- openai


def test_openai_sync_tool_loop(swarm, episode):
    uuid, creds = episode
    oc = openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key)
    swarm.answer(CALL, FINAL)
    messages = [{"role": "user", "content": "2+3?"}]
    first = oc.chat.completions.create(model="policy", messages=messages, tools=[ADD_TOOL])
    call = first.choices[0].message.tool_calls[0]
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": str(add(**json.loads(call.function.arguments)))},
    ]
    second = oc.chat.completions.create(model="policy", messages=messages, tools=[ADD_TOOL])
    assert second.choices[0].message.content == FINAL
    swarm.assert_episode_trains(uuid, min_calls=2)


def test_openai_async_streaming_with_tools(swarm, episode):
    uuid, creds = episode
    swarm.answer("Adding." + CALL)

    async def run():
        async with openai.AsyncOpenAI(base_url=creds.base_url, api_key=creds.api_key) as oc:
            stream = await oc.chat.completions.create(
                model="policy", messages=[{"role": "user", "content": "2+3?"}], tools=[ADD_TOOL], stream=True
            )
            return [c async for c in stream]

    chunks = asyncio.run(run())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert text == "Adding." and calls[0].function.name == "add"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) > 3  # streamed, not one blob
    swarm.assert_episode_trains(uuid)


# ---------------------------------------------------------------- OpenAI Agents SDK


def _recording_client(paths: list[str]) -> httpx.AsyncClient:
    """An async httpx client that notes the path of every request (which API a framework really called)."""

    async def note(request: httpx.Request) -> None:
        paths.append(request.url.path)

    return httpx.AsyncClient(event_hooks={"request": [note]})


def _agent(creds, responses: bool, paths: list[str]):
    from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # no trace upload: nothing leaves the machine
    client = openai.AsyncOpenAI(base_url=creds.base_url, api_key=creds.api_key, http_client=_recording_client(paths))
    model = (OpenAIResponsesModel if responses else OpenAIChatCompletionsModel)(model="policy", openai_client=client)
    return Agent(name="calculator", instructions="Use the add tool.", tools=[function_tool(add)], model=model)


@pytest.mark.parametrize("responses", [False, True], ids=["chat-completions", "responses"])
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
def test_openai_agents_sdk(swarm, episode, responses, streamed):
    from agents import Runner

    uuid, creds = episode
    swarm.answer(CALL, FINAL)
    paths: list[str] = []
    agent = _agent(creds, responses, paths)

    async def run():
        if not streamed:
            return (await Runner.run(agent, "What is 2+3?")).final_output, []
        result = Runner.run_streamed(agent, "What is 2+3?")
        events = [e async for e in result.stream_events()]
        return result.final_output, events

    final, events = asyncio.run(run())
    assert final == FINAL
    assert paths == ["/v1/responses" if responses else "/v1/chat/completions"] * 2
    if streamed:
        assert any(e.type == "raw_response_event" for e in events)
    swarm.assert_episode_trains(uuid, min_calls=2)


@pytest.mark.parametrize("responses", [False, True], ids=["chat-completions", "responses"])
def test_the_agents_sdk_with_tool_choice_required(swarm, episode, responses):
    """`ModelSettings(tool_choice="required")`: the embedded engine constrains the first answer to a call (the
    Agents SDK then resets the choice, and the agent answers)."""
    from agents import ModelSettings, Runner

    uuid, creds = episode
    swarm.answer(["<", "tool_call>", json.dumps({"name": "add", "arguments": {"a": 2, "b": 3}}), "</tool_call>"], FINAL)
    agent = _agent(creds, responses, []).clone(model_settings=ModelSettings(tool_choice="required"))
    result = asyncio.run(Runner.run(agent, "What is 2+3?"))
    assert result.final_output == FINAL
    calls = swarm.store.calls(uuid)
    first = json.loads(calls[0].request)
    assert first["tool_choice"] == "required" and calls[0].finish_reason == "tool_calls"
    swarm.assert_episode_trains(uuid, min_calls=2)


# ---------------------------------------------------------------- LangChain / LangGraph


def _chat_model(creds, paths: list[str] | None = None, **kw):
    from langchain_openai import ChatOpenAI

    noted = [] if paths is None else paths

    def note(request: httpx.Request) -> None:
        noted.append(request.url.path)

    # one async httpx client per episode: LangChain caches its default client, which breaks across event loops
    return ChatOpenAI(
        model="policy",
        base_url=creds.base_url,
        api_key=creds.api_key,
        http_client=httpx.Client(event_hooks={"request": [note]}),
        http_async_client=httpx.AsyncClient(),
        **kw,
    )


def test_langchain_invoke_stream_and_bind_tools(swarm, episode):
    uuid, creds = episode
    llm = _chat_model(creds)
    swarm.answer("hello", "streamed answer", CALL)
    assert llm.invoke("hi").content == "hello"
    pieces = [c.content for c in llm.stream("hi")]
    assert "".join(pieces) == "streamed answer" and len([p for p in pieces if p]) > 3
    msg = llm.bind_tools([add]).invoke("2+3?")
    assert msg.tool_calls[0]["name"] == "add" and msg.tool_calls[0]["args"] == {"a": 2, "b": 3}
    swarm.assert_episode_trains(uuid, min_calls=3)


def test_langchain_responses_api(swarm, episode):
    uuid, creds = episode
    paths: list[str] = []
    llm = _chat_model(creds, paths, use_responses_api=True)
    swarm.answer("via responses", CALL)
    assert llm.invoke("hi").text == "via responses"
    msg = llm.bind_tools([add]).invoke("2+3?")
    assert msg.tool_calls[0]["name"] == "add" and msg.tool_calls[0]["args"] == {"a": 2, "b": 3}
    assert paths == ["/v1/responses"] * 2
    swarm.assert_episode_trains(uuid, min_calls=2)


def test_langgraph_react_agent(swarm, episode):
    from langgraph.prebuilt import create_react_agent

    uuid, creds = episode
    swarm.answer(CALL, FINAL)
    agent = create_react_agent(_chat_model(creds), [add])
    out = asyncio.run(agent.ainvoke({"messages": [("user", "What is 2+3?")]}))
    assert out["messages"][-1].content == FINAL
    assert any(getattr(m, "name", None) == "add" and m.content == "5" for m in out["messages"])  # the tool ran
    swarm.assert_episode_trains(uuid, min_calls=2)


# ---------------------------------------------------------------- anthropic


def test_anthropic_sdk_tool_loop(swarm, episode):
    import anthropic

    uuid, creds = episode
    ac = anthropic.Anthropic(base_url=creds.base_url.removesuffix("/v1"), api_key=creds.api_key)
    tools = [{"name": "add", "description": "Add two integers.", "input_schema": ADD_TOOL["function"]["parameters"]}]
    swarm.answer(CALL, FINAL)
    messages = [{"role": "user", "content": "2+3?"}]
    first = ac.messages.create(model="policy", max_tokens=64, tools=tools, messages=messages)
    use = next(b for b in first.content if b.type == "tool_use")
    messages += [
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": str(add(**use.input))}]},
    ]
    with ac.messages.stream(model="policy", max_tokens=64, tools=tools, messages=messages) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == FINAL
    swarm.assert_episode_trains(uuid, min_calls=2)


# ---------------------------------------------------------------- errors, as each framework shows them


@pytest.fixture()
def ended_key(swarm):
    """The credentials of an episode that has ended: every call is refused, saying so."""
    uuid, creds = swarm.client.begin_episode()
    swarm.answer("x")
    openai.OpenAI(base_url=creds.base_url, api_key=creds.api_key).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "x"}]
    )
    swarm.client.end_episode(Task(task_id="framework"), uuid, WorkflowOutput(reward=0.0))
    return creds


@pytest.mark.parametrize("responses", [False, True], ids=["chat-completions", "responses"])
def test_the_agents_sdk_shows_why_a_key_is_refused(ended_key, responses):
    from agents import Runner

    with pytest.raises(openai.AuthenticationError) as err:
        asyncio.run(Runner.run(_agent(ended_key, responses, []), "hi"))
    assert err.value.code == "invalid_api_key" and "has ended" in str(err.value)


def test_langchain_shows_why_a_key_is_refused(ended_key):
    with pytest.raises(openai.AuthenticationError) as err:
        _chat_model(ended_key).invoke("hi")
    assert "has ended" in str(err.value)


def test_langchain_shows_the_field_a_request_got_wrong(episode):
    _uuid, creds = episode
    with pytest.raises(openai.BadRequestError) as err:
        _chat_model(creds, temperature=7).invoke("hi")
    assert err.value.param == "temperature" and "temperature" in str(err.value)
