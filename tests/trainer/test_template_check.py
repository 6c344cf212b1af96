"""The template preflight: would rendered history merge, and if not, why (`ajet_trainer.template_check`)."""

from transformers import AutoTokenizer

from ajet_trainer.template_check import preflight, template_verdict, verdict_metrics
from ajet_trainer.tiny_model import build_tokenizer, builtin_model_path


def test_each_built_in_template_is_reported_with_its_causes():
    for name, causes in (
        ("tiny", ("tool_rerendering",)),
        ("tiny-bpe", ("tool_rerendering",)),
        ("tiny-bpe-think", ("tool_rerendering", "think_stripping")),
    ):
        tok = build_tokenizer(name)
        report = preflight(tok, tok.eos_token_id)
        assert (report.turns, report.causes, report.merges) == (2, causes, False), name
        assert all(c in report.warning() for c in causes) and 'token_history="exact"' in report.warning()
        assert report.metrics()["history/template_rendered_merges"] == 0.0
        assert {k for k in report.metrics() if "/template_breaks/" in k} == {
            f"history/template_breaks/{c}" for c in causes
        }


def test_a_template_without_a_generation_prompt_is_named():
    tok = build_tokenizer("tiny-bpe")
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    report = preflight(tok, tok.eos_token_id)
    assert report.causes == ("no_generation_prompt",) and not report.merges


def test_a_template_that_keeps_answers_as_written_breaks_only_at_the_tool_call():
    """A template that renders each message's text as it is: the answer with reasoning merges; the tool call's
    turn breaks (its text left the content when it was parsed, and this template renders no tool calls)."""
    tok = build_tokenizer("tiny")
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    report = preflight(tok, tok.eos_token_id)
    assert (report.turns, report.merged, report.causes) == (2, 1, ("tool_rerendering",))


def test_the_verdict_reads_the_jobs_model_and_never_fails_a_boot():
    metrics = verdict_metrics(template_verdict("builtin:tiny-bpe-think"))
    assert metrics["history/template_breaks/think_stripping"] == 1.0
    assert metrics["history/template_rendered_merges"] == 0.0
    assert verdict_metrics(template_verdict("/no/such/model")) == {} and verdict_metrics(None) == {}
    assert AutoTokenizer.from_pretrained(builtin_model_path("builtin:tiny-bpe"))  # the folder is a normal HF one
