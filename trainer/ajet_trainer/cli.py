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
from typing import TYPE_CHECKING, Optional

from ajet import __version__
from ajet.errors import AjetError
from ajet_core.flags import add_config_option, add_log_level_option, apply_defaults, parse_with_config
from ajet_core.runtime import apply_offline_env, run_cli
from ajet_store.connect import add_store_options

if TYPE_CHECKING:
    from ajet_trainer.options import TrainerOptions


def add_trainer_options(p: argparse.ArgumentParser) -> None:
    """The trainer's own options (`ajet-swarm start` declares them through this too); defaults:
    configs/trainer.yaml."""
    p.add_argument(
        "--engine",
        choices=["auto", "embedded", "vllm", "hybrid"],
        help="what answers the agents' calls. embedded: this process's transformers engine. vllm: launch "
        "vLLM's server (--vllm-engines N of them); after each step it hot-loads the LoRA adapter, or reloads "
        "the full weights in place. hybrid (--backend verl): verl launches vLLM engines colocated with its "
        "actor and syncs them itself. auto: hybrid for --backend verl on CUDA, else embedded",
    )
    add_vllm_options(p)
    p.add_argument(
        "--backend",
        choices=["auto", "embedded", "verl"],
        help="verl: verl's FSDP actor workers on Ray train; with --engine embedded|vllm they train "
        "beside that engine (on CPU too: verl's CPU platform, gloo), with --engine hybrid verl "
        "serves from its own vLLM engines (CUDA). embedded: this process trains. auto: verl where "
        "CUDA, verl and vLLM are present, else embedded",
    )
    p.add_argument("--ray-address", help="verl backend: Ray cluster to join (unset: $RAY_ADDRESS, else a local Ray)")
    p.add_argument("--nnodes", type=int, help="verl backend: nodes of the Ray cluster to train on")
    p.add_argument(
        "--store-outage-s",
        type=float,
        help="how long to wait, retrying with backoff and keeping the model in memory, for a store that is away "
        "(a database restart) before stopping",
    )
    p.add_argument(
        "--verl-overrides",
        metavar="FILE",
        help="verl backend: YAML of dotted verl config keys applied after the job's (unset: "
        "configs/verl_overrides.yaml)",
    )
    p.add_argument("--experiment-dir", help="override the job's experiment folder")
    p.add_argument("--device", help="auto, cpu or cuda[:N]")
    p.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads (1 avoids spin-waits when proxy and clients share the cores; "
        "environment: AJET_TORCH_THREADS)",
    )


def add_vllm_options(p: argparse.ArgumentParser) -> None:
    """The options of `--engine vllm`; defaults: configs/trainer.yaml."""
    p.add_argument(
        "--vllm-python",
        help="--engine vllm: the Python with vLLM installed (unset: .venv-vllm/bin/python, which "
        "`make setup-vllm` builds on a CPU machine, when present; else this Python)",
    )
    p.add_argument(
        "--vllm-arg",
        action="append",
        metavar="ARG",
        help="--engine vllm: one more vLLM server argument, repeatable, written with '=': "
        "--vllm-arg=--tensor-parallel-size=2 --vllm-arg=--dtype=bfloat16; it replaces the trainer's "
        "default of the same flag (tool parser hermes, memory share, dtype, max LoRA rank)",
    )
    p.add_argument("--vllm-engines", type=int, help="--engine vllm: how many vLLM engines to launch")
    p.add_argument(
        "--vllm-max-experiments",
        type=int,
        help="--engine vllm with LoRA: experiments one vLLM server serves at once, each its own adapters",
    )
    p.add_argument(
        "--vllm-gpu-groups",
        help="--engine vllm: CUDA_VISIBLE_DEVICES of each vLLM engine, ';'-separated ('0,1;2,3': two engines)",
    )
    p.add_argument(
        "--vllm-sleep",
        action="store_true",
        help="--engine vllm on CUDA: vLLM sleeps during each update, freeing the GPU memory it shares with training",
    )
    p.add_argument(
        "--vllm-command",
        help="--engine vllm: a launch prefix replacing `python -m vllm.entrypoints.openai.api_server` (a "
        "stand-in that speaks vLLM's HTTP API)",
    )


def add_trainer_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of `ajet-trainer start`, with their defaults (configs/trainer.yaml, then AJET_DB)."""
    add_store_options(p)
    add_trainer_options(p)
    add_log_level_option(p)
    add_config_option(p, "trainer.yaml")
    apply_defaults(p, "trainer.yaml")


def trainer_options(args: argparse.Namespace) -> "TrainerOptions":
    """The parsed `ajet-trainer start` flags as the daemon's settings."""
    from ajet_trainer.options import TrainerOptions

    return TrainerOptions(
        db_url=args.db,
        db_mode=args.db_mode,
        experiment_dir=args.experiment_dir,
        engine=args.engine,
        backend=args.backend,
        device=args.device,
        vllm_python=args.vllm_python,
        vllm_args=tuple(args.vllm_arg),
        vllm_engines=args.vllm_engines,
        vllm_max_experiments=args.vllm_max_experiments,
        vllm_gpu_groups=args.vllm_gpu_groups,
        vllm_sleep=args.vllm_sleep,
        vllm_command=args.vllm_command,
        ray_address=args.ray_address,
        nnodes=args.nnodes,
        store_outage_s=args.store_outage_s,
        verl_overrides=args.verl_overrides,
    )


def run_trainer(args: argparse.Namespace) -> None:
    """Run the trainer daemon until SIGINT/SIGTERM."""
    apply_offline_env()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import torch

    torch.set_num_threads(max(1, args.threads))
    from ajet_trainer.daemon import TrainerDaemon

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    TrainerDaemon(trainer_options(args)).run(stop)


def export_model(args: argparse.Namespace) -> None:
    """A checkpoint as a model folder (`AutoModelForCausalLM.from_pretrained(OUT)`, `vllm serve OUT`)."""
    from pathlib import Path

    from ajet_trainer.experiment_dir import folder_of_experiment
    from ajet_trainer.model_export import export_model as export

    folder = Path(args.experiment_dir)
    if args.experiment:
        folder = folder_of_experiment(folder, args.experiment)
    out = export(folder, Path(args.out), args.step, args.merge_lora)
    print(f"exported to {out}")


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
