"""What the monitor (`overwatch.py`) draws from the proxy's answers: its text panels and the episode screen."""

from __future__ import annotations

from typing import Any, Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ajet.evaluation_types import EvaluationInfo
from ajet.rollout_summary import progress_bar, updating_text
from ajet.stat_types import EpisodeDetail, RolloutStat
from ajet.types import BatchMode

MODES = [BatchMode.EPISODES, BatchMode.TASKS, BatchMode.NON_DUMMY_TASKS]
"""The batch modes, in the order of the monitor's keys 1, 2, 3."""


def pool_text(stat: RolloutStat) -> Text:
    """The rollout pool: one line per batch mode, the active one highlighted."""
    out = Text()
    for p in stat.progress:
        name = p.mode.value.replace("rollout_until_finish_enough_", "")
        key = MODES.index(p.mode) + 1
        line = f"[{key}] {name:<16} {progress_bar(p.current, p.target, 24)} {p.current:>4}/{p.target:<4}\n"
        out.append(line, style="bold reverse" if p.mode == stat.batch_mode else "")
    t = stat.totals
    out.append(
        f"open {t.get('open', 0)}  ended {t.get('ended', 0)}  aborted {t.get('aborted', 0)}  "
        f"expired {t.get('expired', 0)}"
    )
    return out


def header_text(url: str, stat: Optional[RolloutStat], connected: bool, error: str = "") -> Text:
    """URL, experiment's state and time in it, step, policy version, calls and errors, connection."""
    out = Text(f"{url}  ")
    if not connected:
        out.append("DISCONNECTED", style="bold white on red")
        out.append(f"  {error}  (retrying)")
        return out
    out.append("CONNECTED", style="bold green")
    if stat is not None:
        e = stat.experiment
        out.append(f"   engine {e.state.value} ({e.state_seconds:.0f}s)")
        out.append(updating_text(e), style="bold cyan")
        out.append(
            f"  step {e.global_step}  policy v{e.policy_version}  calls {stat.totals.get('calls', 0)}  "
            f"errors {stat.totals.get('call_errors', 0)}"
        )
        if stat.totals.get("without_calls"):
            out.append(f"  without calls {stat.totals['without_calls']} (never train)", style="yellow")
        if stat.totals.get("stale"):
            out.append(f"  stale {stat.totals['stale']} (dropped, never train)", style="yellow")
        if stat.totals.get("lost_call"):
            out.append(
                f"  lost call {stat.totals['lost_call']} (in flight at a proxy crash: recorded as never answered)",
                style="yellow",
            )
        if e.trainer_stopped_s is not None:
            out.append(f"\n   the trainer stopped {e.trainer_stopped_s:.0f}s ago: start it again", style="bold red")
        if e.trainer_silent_s is not None:
            out.append(f"\n   no trainer heartbeat for {e.trainer_silent_s:.0f}s: ", style="bold red")
            out.append("the trainer is down or cannot write to the store; begin_episode is refused")
        if e.last_error:
            out.append(f"\n   trainer error {e.last_error_age_s or 0:.0f}s ago: ", style="bold red")
            out.append(e.last_error[:300])
        if e.template is not None:
            out.append("\n   template: ", style="bold")
            out.append(e.template.summary()[:400], style="" if e.template.merges else "yellow")
    return out


def reward_text(stat: RolloutStat) -> Text:
    """The latest step's metrics."""
    if not stat.recent_steps:
        return Text("no training step yet")
    s = stat.recent_steps[-1]
    m = s.metrics
    parts = [
        f"step {s.step}",
        f"reward {s.reward_mean:.3f}" if s.reward_mean is not None else "reward n/a",
        f"episodes {s.num_episodes}",
    ]
    for key in ("loss", "kl", "grad_norm", "entropy", "clip_frac", "train_s", "step_s"):
        if isinstance(m.get(key), (int, float)):
            parts.append(f"{key} {m[key]:.4g}")
    return Text("  ".join(parts) + history_text(m) + evaluation_text(stat.last_evaluation))


def evaluation_text(e: Optional[EvaluationInfo]) -> str:
    """The last evaluation as a line of its own ("" when there is none)."""
    if e is None:
        return ""
    served = f"v{e.version_min}" if e.version_min == e.version_max else f"v{e.version_min}-{e.version_max}"
    return (f"\nheld-out {e.name} ({served}, step {e.global_step}): reward {e.mean_reward:.3f}  "
            f"pass@{e.k} {e.pass_at_k:.3f}  {e.tasks} tasks")  # fmt: skip


def history_text(m: dict[str, Any]) -> str:
    """The step's token-history figures (merge rate, sequences and tokens per episode, fallbacks by reason) as a
    second line; "" for a step recorded without them."""
    if not isinstance(m.get("history/merge_rate"), (int, float)):
        return ""
    line = (
        f"\nmerged {m['history/merge_rate']:.0%} of turns  "
        f"{m.get('history/sequences_per_episode', 0):.2f} seqs/episode  "
        f"{m.get('history/tokens_per_episode', 0):.0f} tokens/episode"
    )
    reasons = sorted((k.split("/", 2)[2], v) for k, v in m.items() if k.startswith("history/fallback/") and v)
    if reasons:
        line += "  fallbacks " + ", ".join(f"{reason} {int(n)}" for reason, n in reasons)
    breaks = sorted(k.split("/", 2)[2] for k in m if k.startswith("history/template_breaks/"))
    if breaks:
        line += f"  (the template re-renders history: {', '.join(breaks)})"
    return line


class EpisodeScreen(ModalScreen[None]):
    """One episode's calls: messages, token counts, finish reasons, latency; and a link to its explorer page (its
    trained tokens, in a browser)."""

    BINDINGS = [Binding("escape,q", "app.pop_screen", "close")]

    def __init__(self, detail: EpisodeDetail, page_url: str):
        super().__init__()
        self.detail = detail
        self.page_url = page_url
        """The episode's page in the explorer the proxy serves (`/explore/episodes/UUID`)."""

    def compose(self) -> ComposeResult:
        d = self.detail
        head = (
            f"episode {d.episode_uuid}  client {d.client_id}  {d.status.value}  task {d.task_id or '-'}  "
            f"reward {d.reward if d.reward is not None else '-'}  calls {len(d.calls)}"
        )
        link = Text("explorer: ")
        link.append(self.page_url, style=f"link {self.page_url} underline")
        with VerticalScroll(id="episode-view"):
            yield Static(head, id="episode-head")
            yield Static(link, id="episode-link")
            for c in d.calls:
                body = Text(
                    f"#{c.seq}  prompt {c.prompt_tokens}  completion {c.completion_tokens} tokens  "
                    f"finish {c.finish_reason}  {c.latency_ms:.0f} ms  v{c.policy_version}"
                    f"{'  stream' if c.stream else ''}\n",
                    style="bold",
                )
                for m in c.messages[-6:]:
                    body.append(f"  {m.get('role')}: {str(m.get('content') or '')[:300]}\n")
                body.append(f"  → {c.response[:500]}\n", style="green")
                if c.error:
                    body.append(f"  error: {c.error}\n", style="red")
                yield Static(body, classes="call")
