"""Pure text formatting of a `RolloutStat` (used by `print_rollout_stat`, no Textual needed)."""

from __future__ import annotations

from ajet.stat_types import RolloutStat
from ajet.types import ExperimentStatus


def progress_bar(current: int, target: int, width: int = 20) -> str:
    """`[#####.....]` for current/target, clamped to full."""
    frac = 1.0 if target <= 0 else min(1.0, current / target)
    filled = int(round(frac * width))
    return "[" + "#" * filled + "." * (width - filled) + "]"


def updating_text(e: ExperimentStatus) -> str:
    """` + updating (Ns)` while an asynchronous update runs beside ROLLING, else empty (the summary and the
    monitor's header both show it after the state)."""
    return f" + updating ({e.updating_seconds or 0:.0f}s)" if e.updating else ""


def format_rollout_stat(stat: RolloutStat, max_rows: int = 8) -> str:
    """A compact, one-screen summary of the rollout pool."""
    e = stat.experiment
    lines = [
        f"engine {e.state.value} ({e.state_seconds:.0f}s)"
        + updating_text(e)
        + f"  step {e.global_step}  policy v{e.policy_version}"
        f"  batch {stat.batch_size} tasks x {stat.num_repeat}",
    ]
    for p in stat.progress:
        mark = "*" if p.mode == stat.batch_mode else " "
        name = p.mode.value.replace("rollout_until_finish_enough_", "")
        lines.append(f" {mark} {name:<16} {progress_bar(p.current, p.target)} {p.current}/{p.target}")
    t = stat.totals
    lines.append(
        f"   episodes: open {t.get('open', 0)}  ended {t.get('ended', 0)}  aborted {t.get('aborted', 0)}"
        f"  expired {t.get('expired', 0)}  calls {t.get('calls', 0)}  errors {t.get('call_errors', 0)}"
        + (f"  without calls {t['without_calls']} (never train)" if t.get("without_calls") else "")
        + (f"  stale {t['stale']} (dropped, never train)" if t.get("stale") else "")
    )
    if stat.recent_steps:
        last = stat.recent_steps[-1]
        rm = "n/a" if last.reward_mean is None else f"{last.reward_mean:.3f}"
        lines.append(f"   last step {last.step}: reward {rm} over {last.num_episodes} episodes")
    hung = sorted(stat.open_episodes, key=lambda o: -o.idle_s)[:max_rows]
    for o in hung:
        lines.append(f"   open {o.episode_uuid[:8]} {o.client_id[:24]:<24} idle {o.idle_s:5.1f}s calls {o.num_calls}")
    return "\n".join(lines)
