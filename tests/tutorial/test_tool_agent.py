"""The calculator agent's pure parts (tutorial/example_tool_agent) and the TRL arm's view of the same task
(bench/real_model_trl.py): the reward, the tool, the question split, and the tool schema TRL derives."""

from __future__ import annotations

from transformers.utils import get_json_schema

from bench.real_model_trl import calculator, dataset_rows, final_answer_reward, final_text
from tutorial.example_tool_agent.agent_run import compute_reward
from tutorial.example_tool_agent.calculator import TOOL_SPEC, calculate
from tutorial.example_tool_agent.tasks import RANGES, split_tasks


def test_the_reward_finds_the_number_in_the_final_answer():
    assert compute_reward("The answer is 2,436.", "2436") == 1.0
    assert compute_reward("-15 is the result", "-15") == 1.0
    assert compute_reward("24360", "2436") == 0.0  # a number that merely contains the answer is not it
    assert compute_reward("", "7") == 0.0


def test_the_calculator_answers_and_refuses_what_is_not_two_integers():
    assert calculate({"operation": "multiply", "a": 47, "b": 86}) == "47 * 86 = 4042"
    assert calculate({"operation": "divide", "a": 1, "b": 2}).startswith("error: operation")
    assert calculate({"operation": "add", "a": True, "b": 2}).startswith("error: a and b")
    assert calculate({"operation": "add", "a": 10**13, "b": 2}).startswith("error: a and b")
    assert calculate(["add", 1, 2]).startswith("error:")


def test_the_split_is_seeded_disjoint_and_in_range():
    train, held_out = split_tasks(3)
    assert (len(train), len(held_out)) == (96, 32)
    assert {t.task_id for t in train}.isdisjoint(t.task_id for t in held_out)
    assert [t.task_id for t in split_tasks(3)[1]] == [t.task_id for t in held_out]
    assert [t.task_id for t in split_tasks(4)[1]] != [t.task_id for t in held_out]
    for task in train + held_out:
        op, a, b = task.task_id.split("-")
        low, high = RANGES[op]
        assert low <= int(a) <= high and low <= int(b) <= high
        assert calculate({"operation": op, "a": int(a), "b": int(b)}).endswith(f"= {task.metadata['answer']}")


def test_trl_sees_the_same_tool_as_the_agent():
    schema = get_json_schema(calculator)["function"]
    spec = TOOL_SPEC["function"]
    assert schema["name"] == spec["name"]
    assert (
        schema["parameters"]["properties"]["operation"]["enum"] == spec["parameters"]["properties"]["operation"]["enum"]
    )
    assert {k: v["type"] for k, v in schema["parameters"]["properties"].items()} == {
        "operation": "string",
        "a": "integer",
        "b": "integer",
    }
    assert sorted(schema["parameters"]["required"]) == sorted(spec["parameters"]["required"])
    assert calculator("subtract", 900, 1) == "900 - 1 = 899"


def test_trl_is_rewarded_on_the_first_turn_without_a_call():
    call = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "calculator"}}]}
    episode = [call, {"role": "tool", "content": "2 + 3 = 5"}, {"role": "assistant", "content": "It is 5."}]
    assert final_text(episode) == "It is 5."
    assert final_text([call, {"role": "tool", "content": "5"}]) == ""  # out of turns: no final answer
    assert final_answer_reward([episode, [call]], answer=["5", "5"]) == [1.0, 0.0]
    rows = dataset_rows(0)
    assert len(rows) == 96 and rows[0]["prompt"][0]["role"] == "system"
    assert rows[0]["answer"] == split_tasks(0)[0][0].metadata["answer"]
