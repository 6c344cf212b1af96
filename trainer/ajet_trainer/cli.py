"""`ajet-trainer start`: the trainer daemon on a store (`ajet-swarm start` runs it beside the proxy).

torch and the trainer's modules are imported only once `start` runs, so `--help` and `--version`
answer at once; expected errors print one line (`ajet_core.runtime`).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Optional

from ajet import __version__
from ajet.errors import AjetError
from ajet.evaluation_types import EvaluationInfo
from ajet_core.flags import add_config_option, add_log_level_option, apply_defaults, parse_with_config
from ajet_core.options import add_options, options_from_args
from ajet_core.runtime import apply_offline_env, run_cli
from ajet_store.connect import STORE_KEYS, StoreOptions, add_store_options
from ajet_trainer.options import TrainerOptions


def add_trainer_options(p: argparse.ArgumentParser) -> None:
    """The trainer's own options, generated from `TrainerOptions` (`ajet-swarm start` declares them through this
    too); defaults: configs/trainer.yaml."""
    add_options(p, TrainerOptions, skip=STORE_KEYS)


def add_trainer_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of `ajet-trainer start`, with their defaults (configs/trainer.yaml, then AJET_DB)."""
    add_store_options(p)
    add_trainer_options(p)
    add_log_level_option(p)
    add_config_option(p, "trainer.yaml")
    apply_defaults(p, "trainer.yaml")


def trainer_options(args: argparse.Namespace) -> TrainerOptions:
    """The parsed `ajet-trainer start` flags as the daemon's settings."""
    return options_from_args(TrainerOptions, args)


def run_trainer(args: argparse.Namespace) -> None:
    """Run the trainer daemon until SIGINT/SIGTERM."""
    apply_offline_env()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options = trainer_options(args)
    from ajet_trainer.daemon import TrainerDaemon  # no torch yet: the daemon beats first, then imports it

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    TrainerDaemon(options).run(stop)


def export_model(args: argparse.Namespace) -> None:
    """A checkpoint as a model folder (`AutoModelForCausalLM.from_pretrained(OUT)`, `vllm serve OUT`)."""
    from ajet_trainer.experiment_dir import folder_of_experiment
    from ajet_trainer.model_export import export_model as export

    folder = Path(args.experiment_dir)
    if args.experiment:
        folder = folder_of_experiment(folder, args.experiment)
    step, chosen = args.step, ""
    if args.best is not None:
        best = best_of_store(args, folder)
        step, chosen = best.version_min, f" (step {best.version_min}: {args.best} pass@{best.k} {best.pass_at_k:.3f})"
    out = export(folder, Path(args.out), step, args.merge_lora)
    print(f"exported{chosen} to {out}")


def best_of_store(args: argparse.Namespace, folder: Path) -> EvaluationInfo:
    """`--best`: the best evaluation of the task set, among the versions with a checkpoint in `folder`, as the store
    (`--db`, the experiment `--experiment` names) recorded them."""
    from ajet_store import Catalog, Store
    from ajet_trainer.checkpoint import checkpoint_steps
    from ajet_trainer.errors import CheckpointError
    from ajet_trainer.model_export import best_evaluated

    if args.step is not None:
        raise CheckpointError("--step or --best, not both")
    store, _entries = Catalog(Store(args.db)).take_named(args.experiment)
    if store is None:
        raise CheckpointError(f"the store has no experiment {args.experiment!r}")
    try:
        evaluations = store.evaluations(args.best)
    finally:
        store.close()
    return best_evaluated(evaluations, checkpoint_steps(folder), args.best)


def _main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="ajet-trainer", description="AgentJet Swarm trainer")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_trainer_arguments(sub.add_parser("start", help="train from the store's rewarded episodes"))
    exp = sub.add_parser("export-model", help="write a checkpoint as a model folder other tools load")
    exp.add_argument("--experiment-dir", required=True, help="the experiment folder (holds checkpoints/)")
    exp.add_argument(
        "--experiment",
        default=None,
        help="project/experiment: that experiment of the swarm whose trainer ran with this --experiment-dir",
    )
    exp.add_argument("--step", type=int, default=None, help="the checkpoint's step (default: the newest)")
    exp.add_argument("--best", metavar="TASKSET", default=None,
                     help="the checkpoint of the policy version whose evaluation of TASKSET scored highest (pass@k, "
                     "then the mean reward), as the store (--db) recorded it (ajet.evaluate)")  # fmt: skip
    add_options(exp, StoreOptions, skip=("db_mode", "trainer_timeout_s"))
    apply_defaults(exp, "trainer.yaml")
    exp.add_argument("--out", required=True, help="the folder to write (must not exist, or be empty)")
    exp.add_argument("--merge-lora", action="store_true", help="LoRA: merge the adapter into its base model")
    args = parse_with_config(parser, argv)
    if args.command == "export-model":
        apply_offline_env()
        export_model(args)
    else:
        run_trainer(args)
    return 0


def expected_errors() -> tuple[type[BaseException], ...]:
    """What a user can cause (a bad store URL or schema, a bad job or option): one line, no traceback (every error
    of the tree, the store's and the trainer's included, is an `AjetError`)."""
    return (AjetError,)


def main(argv: Optional[list[str]] = None) -> int:
    """`ajet-trainer`; an expected error prints one line and exits 1."""
    return run_cli("ajet-trainer", _main, argv, expected_errors())


if __name__ == "__main__":
    sys.exit(main())
