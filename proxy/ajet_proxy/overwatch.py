"""Overwatch: a Textual monitor of one swarm, fed only by the proxy's control API.

`ajet-swarm overwatch --swarm-url http://host:10086` (alias `ajet-swarm top`, `ajet-proxy monitor`).
Works from any machine that reaches the proxy; needs no access to the store. A proxy that is down
shows as DISCONNECTED and is polled again every refresh, never a traceback.

Keys: 1/2/3 switch the batch mode (applies to the next step), s cycles the sort of running episodes,
enter opens the selected episode's calls, e watches the swarm's next experiment (or enter on a row of the
Experiments tab), r refreshes now, q quits. Every panel but the Experiments tab is the watched experiment's.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.widgets import DataTable, Footer, Header, Static, TabbedContent, TabPane
from textual_plotext import PlotextPlot

from ajet.client import SwarmClient
from ajet.errors import AjetError
from ajet.stat_types import RolloutStat, StepInfo
from ajet.types import SwarmExperiment
from ajet_proxy.explore_paths import experiment_base
from ajet_proxy.overwatch_views import MODES, EpisodeScreen, header_text, pool_text, reward_text
from ajet_store.placement import DEFAULT_SLUG

SORTS = ["idle_s", "age_s", "num_calls"]
HUNG_FRACTION = 0.5  # an episode idle for half its timeout is shown as hung


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
        Binding("e", "next_experiment", "next experiment"),
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
        self.experiments: list[SwarmExperiment] = []
        """The swarm's experiments as last listed; the watched one is `client.experiment` (None: the first)."""

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
            with TabPane("Experiments", id="tab-experiments"):
                yield DataTable(id="experiments", cursor_type="row", zebra_stripes=True)
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
        self.query_one("#experiments", DataTable).add_columns("", "experiment", "state", "step", "policy", "last error")
        self.set_interval(self.refresh_s, self.action_refresh)
        self.call_later(self.action_refresh)

    # ------------------------------------------------------------------ data
    async def action_refresh(self) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            self.experiments = await asyncio.to_thread(self.client.list_experiments)
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
            header_text(self._watched_title(), self.stat, self.connected, self.last_error)
        )
        if not self.connected or self.stat is None:
            return
        stat = self.stat
        self.query_one("#pool", Static).update(pool_text(stat))
        self.query_one("#reward", Static).update(reward_text(stat))
        self._draw_chart()
        self._fill_episodes(stat)
        self._fill_experiments()
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
        if event.data_table.id == "experiments" and event.row_key.value is not None:
            await self.watch_experiment(str(event.row_key.value))

    async def action_next_experiment(self) -> None:
        names = [e.name for e in self.experiments if e.name]
        if len(names) < 2:
            self.notify("this swarm runs one experiment")
            return
        now = self._watched_name()
        await self.watch_experiment(names[(names.index(now) + 1) % len(names)] if now in names else names[0])

    async def watch_experiment(self, name: str) -> None:
        """Watch experiment `name` (`project/experiment`): every panel but the Experiments tab shows it."""
        self.client.experiment = name
        self.history, self.stat = [], None
        self.notify(f"watching {name}")
        await self.action_refresh()

    def _watched_name(self) -> Optional[str]:
        """The watched experiment's name (the default's, when the client names none)."""
        default = next((e.name for e in self.experiments if e.default), None)
        return self.client.experiment or default

    def _watched_title(self) -> str:
        name = self._watched_name()
        return f"{self.swarm_url}  [{name}]" if name and len(self.experiments) > 1 else self.swarm_url

    def _fill_experiments(self) -> None:
        table, watched = self.query_one("#experiments", DataTable), self._watched_name()
        table.clear()
        for e in self.experiments:
            s = e.status
            cells = ("▶" if e.name == watched else "", (e.name or "(no job yet)") + (" (default)" if e.default else ""),
                     s.state.value, str(s.global_step), f"v{s.policy_version}", (s.last_error or "")[:80])  # fmt: skip
            table.add_row(*cells, key=e.name or "")

    async def open_episode(self, uuid: str) -> None:
        """Show one episode's calls."""
        try:
            detail = await asyncio.to_thread(self.client.get_episode, uuid)
        except AjetError as exc:
            self.notify(f"episode {uuid[:8]}: {exc}", severity="error")
            return
        self.push_screen(EpisodeScreen(detail, f"{self._explorer_base()}/episodes/{uuid}"))

    def _explorer_base(self) -> str:
        """Where the explorer shows the watched experiment (`/explore/x/<slug>`, the slug as the swarm lists it)."""
        watched = self._watched_name()
        slug = next((e.slug for e in self.experiments if e.name == watched), DEFAULT_SLUG)
        return experiment_base(f"{self.swarm_url.rstrip('/')}/explore", slug)


def run(swarm_url: str, refresh: float = 1.0, swarm_token: Optional[str] = None) -> None:
    """Run the monitor in the terminal."""
    Overwatch(swarm_url, refresh, swarm_token).run()
