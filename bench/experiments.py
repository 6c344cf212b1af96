"""Three experiments on one swarm against the same three one after another (issue 40).

Three clients, each its own LoRA job on builtin:demo rewarded for its own letter (tests/support/letters_clients.py),
through `ajet-swarm start`. Together: the three at once on one swarm. One after another: each alone on a fresh swarm,
the next once the last reached the target. Per arm one JSON line: seconds until all three reached 0.8, the steps each
took, and the engines' busy share (the mean of every step's `engine/busy_share`); for together also the p99 latency
of the calls in flight while another experiment's update ran, against the p99 of the others. Then the ratio of
together's seconds to one-after-another's.

With `--engine vllm` the swarms serve through vLLM (its CPU build here, `.venv-vllm`): together, one vLLM server
serves the three experiments' adapters; the rows say which engine.

Usage: python -m bench.experiments [--repeats 1] [--engine embedded|vllm]
"""

from __future__ import annotations

import argparse
import tempfile
import threading
from pathlib import Path

from ajet_core.runtime import apply_offline_env
from bench.results import emit

apply_offline_env()

from ajet.stat_types import StepInfo  # noqa: E402
from ajet_store import Store, experiment_store, sqlite_url  # noqa: E402
from ajet_store.types import CallRecord  # noqa: E402
from ajet_swarm.launch import launched_swarm  # noqa: E402
from tests.support.letters_clients import LETTERS, Experiment  # noqa: E402


def run_clients(url: str, names: list[str]) -> list[Experiment]:
    """The clients of `names` at once against the swarm at `url`, until each reached the target (or its step cap)."""
    runs = [Experiment(url, name) for name in names]
    threads = [threading.Thread(target=r.run, name=r.name) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in runs:
        if r.error is not None:
            raise SystemExit(f"{r.name} failed: {r.error!r}")
    return runs


def stores(root: Path) -> dict[str, Store]:
    """Each experiment's store of the swarm under `root`, by the job's experiment name."""
    first = Store(sqlite_url(root / "ajet-swarm.db"))
    out = {first.experiment().job.experiment_name: first}
    for entry in first.experiment_entries():
        st = experiment_store(first, entry.name)
        out[st.experiment().job.experiment_name] = st
    return out


def busy_share(steps: list[StepInfo]) -> float | None:
    """The mean of the steps' `engine/busy_share`; None where the engine does not count its busy time (vLLM)."""
    shares = [s.metrics.get("engine/busy_share") for s in steps if s.metrics]
    shares = [x for x in shares if x is not None]
    return round(sum(shares) / len(shares), 3) if shares else None


def update_windows(steps: list[StepInfo]) -> list[tuple[float, float]]:
    """When each step's update ran (its learner, publish and checkpoint, ending at the step's record)."""
    return [
        (s.finished_at - s.metrics.get("train_s", 0.0) - s.metrics.get("sync_s", 0.0), s.finished_at) for s in steps
    ]


def p99(values: list[float]) -> float:
    ranked = sorted(values)
    return round(ranked[min(len(ranked) - 1, int(0.99 * len(ranked)))], 1) if ranked else 0.0


def latencies(by_name: dict[str, Store]) -> dict[str, float]:
    """p99 call latency (ms) of the calls in flight while another experiment updated, and of the rest."""
    windows = {name: update_windows(st.steps()) for name, st in by_name.items()}
    during, rest = [], []
    for name, st in by_name.items():
        others = [w for other, ws in windows.items() if other != name for w in ws]
        calls: list[CallRecord] = [c for e in st.episodes() for c in st.calls(e.uuid) if c.error is None]
        for c in calls:
            start = c.created_at - c.latency_ms / 1000.0
            hit = any(start < end and c.created_at > begin for begin, end in others)
            (during if hit else rest).append(c.latency_ms)
    return {"p99_ms_during_others_updates": p99(during), "p99_ms_otherwise": p99(rest), "calls_during": len(during)}


def arm_together(root: Path, engine: str) -> dict:
    with launched_swarm(root, "--engine", engine, timeout=600) as url:
        runs = run_clients(url, list(LETTERS))
    by_name = stores(root)
    steps = [s for st in by_name.values() for s in st.steps()]
    return {
        "seconds": round(max(r.seconds for r in runs), 1),
        "steps": {r.name: len(r.rewards) for r in runs},
        "all_reached_0_8": all(r.reached() for r in runs),
        "engine_busy_share": busy_share(steps),
        **latencies(by_name),
    }


def arm_one_after_another(root: Path, engine: str) -> dict:
    seconds, steps, reached, all_steps = 0.0, {}, True, []
    for name in LETTERS:
        with launched_swarm(root / name, "--engine", engine, timeout=600) as url:
            (run,) = run_clients(url, [name])
        seconds, reached = seconds + run.seconds, reached and run.reached()
        steps[name] = len(run.rewards)
        all_steps += [s for st in stores(root / name).values() for s in st.steps()]
    return {"seconds": round(seconds, 1), "steps": steps, "all_reached_0_8": reached,
            "engine_busy_share": busy_share(all_steps)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--engine", choices=["embedded", "vllm"], default="embedded")
    args = ap.parse_args()
    tag = {"engine": args.engine}
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            together = arm_together(Path(tmp) / "together", args.engine)
            emit("experiments", {"figure": "arm", "arm": "together", "repeat": repeat, **tag, **together})
            alone = arm_one_after_another(Path(tmp) / "alone", args.engine)
            emit("experiments", {"figure": "arm", "arm": "one_after_another", "repeat": repeat, **tag, **alone})
            ratio = round(together["seconds"] / alone["seconds"], 3)
            emit("experiments", {"figure": "ratio", "repeat": repeat, **tag,
                                 "together_over_one_after_another_seconds": ratio})  # fmt: skip


if __name__ == "__main__":
    main()
