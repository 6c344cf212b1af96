"""`ajet-proxy rescore`: a reward function over stored episodes, each score kept as a new reward version.

The loop only sequences: read a page of the version's unscored episodes (`Store.unscored`), rebuild each as the
function sees it (`ajet.rescoring.stored_episode`), score it (`ajet.rescoring.score`: an error is that episode's),
write the page's scores in one transaction (`Store.write_rewards`). Killed midway, a re-run of the same function
on the same selection is the same version and scores only what is left; run again once finished, it scores
nothing. The original rewards are never written.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Optional

from pydantic import ValidationError

from ajet.errors import ConfigError
from ajet.judge import Judge, judge_reward, judge_version_name
from ajet.rescore_types import StoredEpisode
from ajet.rescoring import RewardFunction, load_reward_function, score, source_hash, stored_episode
from ajet_core.chat_request import invalid_request
from ajet_store import EpisodeReward, EpisodeRow, EpisodeSelection, RewardVersion, Store

PAGE = 64
"""Episodes read, scored and written together."""


def rescore(
    store: Store,
    fn: RewardFunction,
    name: str,
    selection: EpisodeSelection,
    page: int = PAGE,
    on_page: Optional[Callable[[int], None]] = None,
) -> RewardVersion:
    """Score the selection's episodes with `fn` (named `name`, `module:function`) as one reward version; returns
    it finished. `on_page(n)` is told each page's size once it is written."""
    version = store.reward_version(name, source_hash(fn), selection)
    batch: list[EpisodeReward] = []
    for row in store.unscored(version, page):
        batch.append(_scored(store, fn, version.version, row))
        if len(batch) >= page:
            _write(store, version.version, batch, on_page)
    _write(store, version.version, batch, on_page)
    return store.finish_reward_version(version.version)


def stored_view(store: Store, row: EpisodeRow) -> StoredEpisode:
    """An ended episode as a reward function sees it (its calls read from `store`)."""
    return stored_episode(row.uuid, row.metadata or {}, row.reward, row.is_success, store.calls(row.uuid))


def _scored(store: Store, fn: RewardFunction, version: int, row: EpisodeRow) -> EpisodeReward:
    """One episode's score under `fn`."""
    reward, success, error = score(fn, stored_view(store, row))
    return EpisodeReward(row.uuid, version, reward, success, error)


def _write(store: Store, version: int, batch: list[EpisodeReward], on_page: Optional[Callable[[int], None]]) -> None:
    if batch:
        store.write_rewards(version, batch)
        if on_page is not None:
            on_page(len(batch))
        batch.clear()


def add_rescore_arguments(p: argparse.ArgumentParser) -> None:
    """`ajet-proxy rescore`'s own options (the store's and `--experiment` are added with the other commands')."""
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--reward", help="the reward function, module:function (imported from here)")
    judged = "score each episode's final answer with the swarm's served judge against this rubric (ajet.judge)"
    how.add_argument("--judge", metavar="RUBRIC", help=judged)
    p.add_argument("--judge-url", default="http://127.0.0.1:10086", help="--judge: the swarm serving the judge")
    p.add_argument("--reference-key", default="answer", help="--judge: the task metadata key of the reference answer")
    add_selection_arguments(p)
    p.add_argument("--page", type=int, default=PAGE, help="episodes scored and written together (a kill loses one)")


def add_selection_arguments(p: argparse.ArgumentParser) -> None:
    """The options that select stored episodes (`selection_of` reads them)."""
    p.add_argument("--steps", help="only episodes trained at these steps: A:B, A: or :B (inclusive)")
    p.add_argument("--task", help="only this task's episodes")
    p.add_argument("--mission", help="only this mission's episodes")
    p.add_argument("--scored-in", type=int, help="only episodes this earlier reward version scored")
    p.add_argument("--eval", action="store_true", help="take eval episodes instead of training episodes")


def selection_of(args: argparse.Namespace) -> EpisodeSelection:
    """The episodes the command's options select (`ConfigError` for a malformed `--steps`)."""
    first = last = None
    if args.steps:
        a, sep, b = args.steps.partition(":")
        try:
            first, last = ((int(a) if a else None), (int(b) if b else None)) if sep else (int(a), int(a))
        except ValueError:
            raise ConfigError(f"--steps {args.steps!r}: give A:B, A: or :B with step numbers") from None
    try:
        return EpisodeSelection(
            first_step=first, last_step=last, task_id=args.task, mission=args.mission, scored_in=args.scored_in,
            episode_type="eval" if args.eval else "train",
        )  # fmt: skip
    except ValidationError as exc:
        raise ConfigError(f"the selection's {invalid_request(exc).detail}") from None


def run_rescore(args: argparse.Namespace, store: Store) -> RewardVersion:
    """Score the selected episodes of `store` with `--reward` (or the served judge, `--judge`), printing progress;
    the finished version."""
    if args.judge is not None:
        judge, rubric, key = Judge(args.judge_url), args.judge, args.reference_key
        fn, name = judge_reward(judge, rubric, key), judge_version_name(judge, rubric, key)
    else:
        sys.path.insert(0, os.getcwd())  # `module:function` is found as `python -m` would find it
        fn, name = load_reward_function(args.reward), args.reward
    done = [0]

    def progress(n: int) -> None:
        done[0] += n
        print(f"scored {done[0]} episode(s)", flush=True)

    return rescore(store, fn, name, selection_of(args), page=args.page, on_page=progress)
