"""The template preflight's verdict: what the job's chat template does to each shape real agents take.

The trainer, which holds the job's tokenizer, runs the shapes (`ajet_token_history.shapes`) through the token
history's rules when a job is synced, and stores the verdict; `sync_train_config` answers it (waiting a few seconds
for the trainer) and `get_engine_status` carries it. The SDK logs it once per job model at the client.
"""

from __future__ import annotations

from typing import Optional

from ajet.wire import AnswerModel


class ShapeVerdict(AnswerModel):
    """One shape (a linear chat, a tool loop, two agents, branches, a compaction) through the token history."""

    shape: str
    """Which shape: `linear`, `tool_loop`, `two_agents`, `branches` or `compaction`."""
    labels: list[str]
    """The token history's label of each call of the shape, in order (`first`, `extended`, `segment:<cause>`,
    `fallback:<reason>`): what the call log would say."""
    expected: list[str]
    """The labels a template that keeps every conversation one sequence gives (a second agent or a compaction
    starts a segment by design; every other call is `extended`)."""
    error: Optional[str] = None
    """The template could not render the shape at all (e.g. no tool turn, two user turns in a row refused): the
    exception, one line. Agents of this shape cannot run on this model."""

    @property
    def merges(self) -> bool:
        """Every conversation of the shape stays one sequence of exactly what the model generated."""
        return self.error is None and self.labels == self.expected

    @property
    def cause(self) -> Optional[str]:
        """Why it does not merge: the template's error, or the first label that is not the expected one."""
        if self.error is not None:
            return self.error
        return next((got for got, want in zip(self.labels, self.expected) if got != want), None)


class TemplateVerdict(AnswerModel):
    """The preflight of one job's chat template."""

    model: str
    """The job's model (its `AgentJetJob.model`) the verdict is about: a verdict of another model is never shown."""
    shapes: list[ShapeVerdict] = []
    """Each shape through `token_history="exact"` (the default)."""
    rendered_merges: Optional[bool] = None
    """Whether `token_history="rendered"` (re-rendering the conversation) would merge a tool conversation's turns."""
    rendered_causes: list[str] = []
    """Why rendered history would not merge (`no_generation_prompt`, `tool_rerendering`, `think_stripping`,
    `answer_rerendered`); none matter with exact history."""
    error: Optional[str] = None
    """The preflight could not run (no tokenizer, no chat template): one line. The job still boots."""

    @property
    def merges(self) -> bool:
        """The template renders every shape, and each merges with exact history."""
        return self.error is None and all(s.merges for s in self.shapes)

    def summary(self) -> str:
        """One line: which shapes merge, which fall back and why."""
        if self.error is not None:
            return f"template preflight of {self.model} could not run: {self.error}"
        good = [s.shape for s in self.shapes if s.merges]
        bad = [f"{s.shape} ({s.cause})" for s in self.shapes if not s.merges and s.error is None]
        refused = [f"{s.shape} ({s.error})" for s in self.shapes if s.error is not None]
        line = f"template preflight of {self.model}: exact token history merges {', '.join(good) or 'no shape'}"
        if bad:
            line += f"; falls back on {', '.join(bad)}"
        if refused:
            line += f"; the template cannot render {', '.join(refused)}"
        if self.rendered_merges is False:
            line += f"; rendered history would not merge ({', '.join(self.rendered_causes)})"
        return line
