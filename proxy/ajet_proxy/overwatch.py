"""Overwatch: a Textual monitor of one swarm, fed only by the proxy's control API.

`ajet-swarm overwatch --swarm-url http://host:10086` (alias `ajet-swarm top`, `ajet-proxy monitor`).
Works from any machine that reaches the proxy; needs no access to the store. A proxy that is down
shows as DISCONNECTED and is polled again every refresh, never a traceback.

Keys: 1/2/3 switch the batch mode (applies to the next step), s cycles the sort of running episodes,
enter opens the selected episode's calls, r refreshes now, q quits.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Header, Static, TabbedContent, TabPane
from textual_plotext import PlotextPlot

from ajet.client import SwarmClient
from ajet.errors import AjetError
from ajet.rollout_summary import progress_bar, updating_text
from ajet.stat_types import EpisodeDetail, RolloutStat, StepInfo
from ajet.types import BatchMode

MODES = [BatchMode.EPISODES, BatchMode.TASKS, BatchMode.NON_DUMMY_TASKS]
SORTS = ["idle_s", "age_s", "num_calls"]
HUNG_FRACTION = 0.5  # an episode idle for half its timeout is shown as hung


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
    return Text("  ".join(parts) + history_text(m))


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


class Overwatch(App[None]):
    """The monitor application."""

    TITLE = "AgentJet Swarm · overwatch"
    CSS = """
    #status { height: 1; padding: 0 1; }
    #top { height: 14; }
    #pool { width: 3fr; border: round $primary; padding: 0 1; }
    #reward-box { width: 2fr; border: round $primary; padding: 0 1; }
    #chart { height: 1fr; display: none; }
    #chart.has-steps { display: block; }
    EpisodeScreen { align: center middle; }
    #episode-view { width: 90%; height: 90%; border: thick $primary; background: $surface; padding: 1; }
    """
    BINDINGS = [
        Binding("1", "mode(0)", "episodes"),
        Binding("2", "mode(1)", "tasks"),
        Binding("3", "mode(2)", "non-dummy"),
        Binding("s", "sort", "sort"),
        Binding("enter", "open_episode", "open episode"),
        Binding("r", "refresh", "refresh"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, swarm_url: str, refresh: float = 1.0, swarm_token: Optional[str] = None):
        super().__init__()
        self.swarm_url = swarm_url
        self.refresh_s = refresh
        self.client = SwarmClient(swarm_url, swarm_token=swarm_token, timeout=3.0, max_retries=0, verbose=False)
        self.stat: Optional[RolloutStat] = None
        self.connected = False
        self.last_error = ""
        self.sort_key = SORTS[0]
        self._busy = False
        self.history: list[StepInfo] = []
        """Every step since the monitor started watching, read incrementally (`get_steps`)."""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(header_text(self.swarm_url, None, False, "connecting"), id="status")
        with Horizontal(id="top"):
            yield Static("", id="pool")
            with Vertical(id="reward-box"):
                yield Static("no training step yet", id="reward")
                yield PlotextPlot(id="chart")
        with TabbedContent(id="tabs"):
            with TabPane("Running episodes", id="tab-episodes"):
                yield DataTable(id="episodes", cursor_type="row", zebra_stripes=True)
            with TabPane("Clients", id="tab-clients"):
                yield DataTable(id="clients", zebra_stripes=True)
            with TabPane("Tasks", id="tab-tasks"):
                yield DataTable(id="tasks", zebra_stripes=True)
            with TabPane("Missions", id="tab-missions"):
                yield DataTable(id="missions", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#episodes", DataTable).add_columns(
            "uuid", "client", "type", "age s", "idle s", "calls", "timeout s"
        )
        self.query_one("#clients", DataTable).add_columns("client", "last seen s", "begun", "ended", "aborted")
        self.query_one("#tasks", DataTable).add_columns("task", "episodes", "reward mean", "dummy")
        self.query_one("#missions", DataTable).add_columns(
            "mission", "open", "ended", "aborted", "in pool", "batch share", "reward mean"
        )
        self.set_interval(self.refresh_s, self.action_refresh)
        self.call_later(self.action_refresh)

    # ------------------------------------------------------------------ data
    async def action_refresh(self) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            self.stat = await asyncio.to_thread(self.client.get_rollout_stat)
            await asyncio.to_thread(self._read_new_steps)
            self.connected, self.last_error = True, ""
        except AjetError as exc:
            self.connected, self.last_error = False, type(exc).__name__
        finally:
            self._busy = False
        try:
            self.render_stat()
        except NoMatches:  # the main screen is not showing (an episode is open, or the app is closing)
            pass

    def render_stat(self) -> None:
        self.query_one("#status", Static).update(
            header_text(self.swarm_url, self.stat, self.connected, self.last_error)
        )
        if not self.connected or self.stat is None:
            return
        stat = self.stat
        self.query_one("#pool", Static).update(pool_text(stat))
        self.query_one("#reward", Static).update(reward_text(stat))
        self._draw_chart()
        self._fill_episodes(stat)
        self._fill(
            self.query_one("#clients", DataTable),
            [(c.client_id, f"{c.last_seen_s:.0f}", c.begun, c.ended, c.aborted) for c in stat.clients],
        )
        self._fill(
            self.query_one("#tasks", DataTable),
            [(t.task_id, t.episodes, f"{t.reward_mean:.3f}", "yes" if t.dummy else "") for t in stat.tasks],
        )
        self._fill(
            self.query_one("#missions", DataTable),
            [
                (
                    m.mission,
                    m.open,
                    m.ended,
                    m.aborted,
                    m.pooled,
                    "-" if m.max_batch_share is None else f"≤ {m.max_batch_share:.0%}",
                    "-" if m.reward_mean is None else f"{m.reward_mean:.3f}",
                )
                for m in stat.missions
            ],
        )

    def _read_new_steps(self) -> None:
        """Append the steps recorded since the last read (a new run starts the history over)."""
        after = self.history[-1].step if self.history else 0
        if self.stat is not None and self.stat.experiment.global_step < after:
            self.history, after = [], 0  # the store was rolled back or replaced
        while True:
            page = self.client.get_steps(after=after)
            self.history.extend(page)
            if len(page) < 1000:
                return
            after = page[-1].step

    def _draw_chart(self) -> None:
        """The reward of every step, with labelled axes; hidden until the first step."""
        chart = self.query_one("#chart", PlotextPlot)
        points = [(s.step, s.reward_mean) for s in self.history if s.reward_mean is not None]
        chart.set_class(bool(points), "has-steps")
        if not points:
            return
        plt = chart.plt
        plt.clear_data()
        plt.clear_figure()
        plt.plot([p[0] for p in points], [p[1] for p in points], marker="braille")
        plt.title(f"reward over {len(points)} steps")
        plt.xlabel("training step")
        plt.ylabel("mean reward")
        chart.refresh()

    def _fill_episodes(self, stat: RolloutStat) -> None:
        table = self.query_one("#episodes", DataTable)
        rows = sorted(stat.open_episodes, key=lambda o: getattr(o, self.sort_key), reverse=True)
        table.clear()
        for o in rows:
            style = "bold red" if o.idle_s > HUNG_FRACTION * o.timeout_s else ""
            cells = [
                o.episode_uuid,
                o.client_id,
                o.episode_type,
                f"{o.age_s:.0f}",
                f"{o.idle_s:.1f}",
                str(o.num_calls),
                f"{o.timeout_s:.0f}",
            ]
            table.add_row(*(Text(c, style=style) for c in cells), key=o.episode_uuid)

    @staticmethod
    def _fill(table: DataTable, rows: list[tuple[Any, ...]]) -> None:
        table.clear()
        for r in rows:
            table.add_row(*(str(c) for c in r))

    # ------------------------------------------------------------------ actions
    async def action_mode(self, index: int) -> None:
        try:
            await asyncio.to_thread(self.client.set_batch_mode, MODES[index])
            self.notify(f"batch mode: {MODES[index].value} (from the next step)")
        except AjetError as exc:
            self.notify(f"could not switch mode: {exc}", severity="error")
        await self.action_refresh()

    def action_sort(self) -> None:
        self.sort_key = SORTS[(SORTS.index(self.sort_key) + 1) % len(SORTS)]
        self.notify(f"running episodes sorted by {self.sort_key}")
        if self.stat is not None:
            self._fill_episodes(self.stat)

    async def action_open_episode(self) -> None:
        table = self.query_one("#episodes", DataTable)
        if table.row_count == 0:
            return
        uuid = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        await self.open_episode(str(uuid))

    async def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "episodes" and event.row_key.value:
            await self.open_episode(str(event.row_key.value))

    async def open_episode(self, uuid: str) -> None:
        """Show one episode's calls."""
        try:
            detail = await asyncio.to_thread(self.client.get_episode, uuid)
        except AjetError as exc:
            self.notify(f"episode {uuid[:8]}: {exc}", severity="error")
            return
        self.push_screen(EpisodeScreen(detail, f"{self.swarm_url.rstrip('/')}/explore/episodes/{uuid}"))


def run(swarm_url: str, refresh: float = 1.0, swarm_token: Optional[str] = None) -> None:
    """Run the monitor in the terminal."""
    Overwatch(swarm_url, refresh, swarm_token).run()
