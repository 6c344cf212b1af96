"""The `ajet-proxy` commands that read or change a store: list and show episodes, export them, plot the steps,
prune old bodies, re-score, write SFT/DPO datasets, upgrade the schema. Each opens the store `--db` names (or
`--experiment`'s beside it), prints what it did in a line or a table, and closes it.
"""

from __future__ import annotations

import argparse

from ajet_store import Store
from ajet_store.connect import sqlite_path


def _store(args: argparse.Namespace) -> Store:
    """The store `--db` names, or with `--experiment NAME` that experiment's store beside it (`ExperimentNotFound`
    for a name the swarm does not list)."""
    from ajet.errors import ExperimentNotFound
    from ajet_store import Catalog

    name = getattr(args, "experiment", None) or None
    store, entries = Catalog(Store(args.db)).take_named(name)
    if store is None:
        listed = ", ".join(e.name for e in entries)
        raise ExperimentNotFound(f"this swarm has no experiment {name!r} (it has: {listed})")
    return store


def episodes_list(args: argparse.Namespace) -> None:
    """One line per episode."""
    from ajet.types import EpisodeStatus

    status = EpisodeStatus(args.status) if args.status else None
    print(f"{'uuid':32}  {'status':8} {'type':5} {'task':20} {'reward':>7} {'calls':>5} {'step':>5}  client")
    store = _store(args)
    try:
        rows = list(store.iter_episodes(status=status))
    finally:
        store.close()
    for row in rows:
        reward = "" if row.reward is None else f"{row.reward:7.3f}"
        step = "" if row.consumed_step is None else str(row.consumed_step)
        print(
            f"{row.uuid:32}  {row.status.value:8} {row.episode_type:5} {(row.task_id or '-')[:20]:20} {reward:>7} "
            f"{row.num_calls:>5} {step:>5}  {row.client_id}"
        )


def episodes_show(args: argparse.Namespace) -> None:
    """Every call of one episode with its text and token counts."""
    from ajet_proxy.stats import episode_detail

    store = _store(args)
    try:
        detail = episode_detail(store.get_episode(args.uuid), store.calls(args.uuid))
    finally:
        store.close()
    print(
        f"episode {detail.episode_uuid}  {detail.status.value}  task {detail.task_id}  reward {detail.reward}"
        f"  client {detail.client_id}  untrainable {detail.untrainable}  step {detail.consumed_step}"
    )
    for c in detail.calls:
        print(
            f"\n--- call {c.seq}: prompt {c.prompt_tokens} / completion {c.completion_tokens} tokens, "
            f"finish {c.finish_reason}, {c.latency_ms:.1f} ms, policy v{c.policy_version}"
            f"{', streamed' if c.stream else ''}{', ERROR ' + c.error if c.error else ''}"
        )
        for m in c.messages:
            print(f"[{m.get('role')}] {m.get('content')}")
        print(f"[answer] {c.response}")


def export(args: argparse.Namespace) -> None:
    """Rewarded episodes to JSONL or Parquet, streamed."""
    from pathlib import Path

    from ajet_proxy.episode_export import export_jsonl, export_parquet

    out = Path(args.out or f"ajet-episodes.{args.format}")
    fn = export_jsonl if args.format == "jsonl" else export_parquet
    images = Path(args.images) if args.images else None
    if images is not None:
        images.mkdir(parents=True, exist_ok=True)
    store = _store(args)
    try:
        n = fn(store, out, args.since, images)
    finally:
        store.close()
    print(f"exported {n} rewarded episode(s) to {out}")


def plot(args: argparse.Namespace) -> None:
    """The run's curves (reward, entropy, log-prob gap, episodes per step) as a PNG."""
    from pathlib import Path

    from ajet.sharing import experiment_of
    from ajet_proxy.plot import plot_steps

    store = _store(args)
    try:
        steps = store.steps()
        job = store.experiment().job
    finally:
        store.close()
    title = "ajet-swarm/default" if job is None else experiment_of(job)
    print(f"plotted {len(steps)} steps to {plot_steps(steps, Path(args.out), title)}")


def prune(args: argparse.Namespace) -> None:
    """Drop the bodies of calls trained more than --keep-steps steps ago; --vacuum returns the space."""
    path = sqlite_path(args.db)
    store = _store(args)
    try:
        before = path.stat().st_size if path else None
        n = store.prune_bodies(args.keep_steps)
        if args.vacuum:
            store.vacuum()
        after = path.stat().st_size if path else None
    finally:
        store.close()
    size = f"; file {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB" if before is not None and after is not None else ""
    print(f"pruned the bodies of {n} call(s) trained more than {args.keep_steps} step(s) ago{size}")


def rescore(args: argparse.Namespace) -> None:
    """A reward function over the store's episodes, as a new reward version beside the original rewards."""
    from ajet_proxy.rescore import run_rescore

    store = _store(args)
    try:
        v = run_rescore(args, store)
    finally:
        store.close()
    print(f"reward version {v.version} ({v.function}): {v.scored} episode(s) scored, {v.failed} failed")


def add_dataset_arguments(p: argparse.ArgumentParser) -> None:
    """`ajet-proxy dataset sft|dpo`'s own options (the store's and `--experiment` come with the other commands')."""
    from ajet_proxy.rescore import add_selection_arguments

    p.add_argument("kind", choices=["sft", "dpo"], help="each group's best episode, or its best against its worst")
    p.add_argument("--form", choices=["ids", "text"], default="ids", help="exact token ids, or messages as text")
    p.add_argument("--reward-version", type=int, default=0, help="judge by this reward version (0: the clients')")
    p.add_argument(
        "--min-reward", type=float, help="sft: the best counts from this reward (default: above its group's mean)"
    )
    p.add_argument(
        "--margin", type=float, default=0.0, help="dpo: the least reward gap of a pair (any gap above 0 by default)"
    )
    p.add_argument(
        "--mask-truncated", action="store_true", help="ids: a cut answer's tokens get mask 0, as the job may"
    )
    p.add_argument("--out", help="the JSONL file (default: ajet-KIND-FORM.jsonl)")
    add_selection_arguments(p)


def dataset(args: argparse.Namespace) -> None:
    """Best-of-group SFT or DPO rows from the store, in TRL's formats (`ajet_proxy.dataset_export`)."""
    from pathlib import Path

    from ajet_proxy import dataset_export as d
    from ajet_proxy.rescore import selection_of

    out = Path(args.out or f"ajet-{args.kind}-{args.form}.jsonl")
    counts, selection = d.DatasetCounts(), selection_of(args)
    store = _store(args)
    try:
        if args.kind == "sft":
            rows = d.sft_rows(
                store, selection, args.reward_version, args.form, counts, args.min_reward, args.mask_truncated
            )
        else:
            rows = d.dpo_rows(
                store, selection, args.reward_version, args.form, counts, args.margin, args.mask_truncated
            )
        d.write_jsonl(rows, out, counts)
    finally:
        store.close()
    left = ", ".join(f"{n} {why}" for why, n in sorted(counts.skipped.items())) or "none"
    print(f"wrote {counts.rows} {args.kind} row(s) from {counts.groups} group(s) to {out}; left out: {left}")


def db_upgrade(args: argparse.Namespace) -> None:
    """Migrate the store to this code's schema (episodes kept); a store already there is left alone."""
    from ajet_store.migrate import upgrade

    before, after = upgrade(args.db)
    if before == after:
        print(f"store {args.db} is at schema {after}: nothing to do")
    else:
        print(f"store {args.db} upgraded from schema {before if before is not None else '(empty)'} to {after}")


BY_NAME = {
    "export": export, "plot": plot, "prune": prune, "rescore": rescore, "dataset": dataset, "db": db_upgrade,
}  # fmt: skip
"""The commands over a store other than `episodes list|show`, by their name on the command line."""
