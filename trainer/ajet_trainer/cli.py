"""Command lines: `ajet-trainer start` and `ajet-swarm start` (proxy + trainer, one command)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

from ajet_proxy.cli import DEFAULT_DB, DEFAULT_PORT, add_monitor_arguments, add_start_arguments, run_monitor


def _offline_env() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def add_trainer_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of `ajet-trainer start`."""
    p.add_argument("--db", default=os.environ.get("AJET_DB", DEFAULT_DB), help="SQLAlchemy URL of the store")
    p.add_argument("--engine", choices=["embedded", "vllm"], default="embedded",
                   help="vllm: launch `vllm serve` and hot-load each step's LoRA adapter. Environment: "
                        "AJET_VLLM_COMMAND (launch command), AJET_VLLM_SLEEP=1 (sleep during updates), "
                        "AJET_VLLM_REPLICAS=N and AJET_VLLM_GPU_GROUPS='0,1;2,3' (one replica per GPU group)")
    p.add_argument("--backend", choices=["embedded", "verl"], default="embedded",
                   help="verl: verl's FSDP workers on Ray train, verl launches and syncs the vLLM replicas "
                        "(needs CUDA and `pip install -e '.[vllm]'`); --engine is then ignored")
    p.add_argument("--ray-address", default=None,
                   help="verl backend: Ray cluster to join (default $RAY_ADDRESS, else a local Ray)")
    p.add_argument("--nnodes", type=int, default=1, help="verl backend: nodes of the Ray cluster to train on")
    p.add_argument("--verl-overrides", default=None,
                   help="verl backend: YAML of dotted verl config keys "
                        "(default: the repo's configs/verl_overrides.yaml)")
    p.add_argument("--experiment-dir", default=None, help="override the job's experiment folder")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    p.add_argument("--threads", type=int, default=int(os.environ.get("AJET_TORCH_THREADS", "1")),
                   help="torch CPU threads (1 avoids spin-waits when proxy and clients share the cores)")
    p.add_argument("--log-level", default="info")


def run_trainer(args: argparse.Namespace) -> None:
    """Run the trainer daemon until SIGINT/SIGTERM."""
    _offline_env()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import torch

    torch.set_num_threads(max(1, args.threads))
    from ajet_trainer.daemon import TrainerDaemon, TrainerOptions

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    TrainerDaemon(TrainerOptions(db_url=args.db, experiment_dir=args.experiment_dir, engine=args.engine,
                                 device=args.device, backend=args.backend, ray_address=args.ray_address,
                                 nnodes=args.nnodes, verl_overrides=args.verl_overrides)).run(stop)


def run_swarm(args: argparse.Namespace) -> int:
    """Proxy and trainer as two child processes; Ctrl-C (or either dying) stops both cleanly."""
    common = ["--db", args.db, "--log-level", args.log_level]
    proxy = [sys.executable, "-m", "ajet_proxy.cli", "start", "--host", args.host, "--port", str(args.swarm_port),
             *common] + (["--swarm-token", args.swarm_token] if args.swarm_token else [])
    trainer = [sys.executable, "-m", "ajet_trainer.cli", "start", *common, "--device", args.device,
               "--threads", str(args.threads), "--backend", args.backend, "--engine", args.engine]
    if args.experiment_dir:
        trainer += ["--experiment-dir", args.experiment_dir]
    env = dict(os.environ, HF_HUB_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True")
    procs = [subprocess.Popen(proxy, env=env), subprocess.Popen(trainer, env=env)]
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    print(f"ajet-swarm: proxy on http://{args.host}:{args.swarm_port}, store {args.db}", flush=True)
    while not stopping.is_set() and all(p.poll() is None for p in procs):
        stopping.wait(0.5)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    for p in procs:
        try:
            p.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
    return max(max(p.returncode or 0, 0) for p in procs)


def trainer_main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="ajet-trainer", description="AgentJet Swarm trainer")
    sub = parser.add_subparsers(dest="command", required=True)
    add_trainer_arguments(sub.add_parser("start", help="train from the store's rewarded episodes"))
    args = parser.parse_args(argv)
    run_trainer(args)
    return 0


def swarm_main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="ajet-swarm", description="AgentJet Swarm: proxy + trainer")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="run ajet-proxy and ajet-trainer together")
    add_start_arguments(start)
    start.set_defaults(port=None)
    start.add_argument("--swarm-port", type=int, default=DEFAULT_PORT)
    start.add_argument("--experiment-dir", default=None)
    start.add_argument("--device", default="auto")
    start.add_argument("--backend", choices=["embedded", "verl"], default="embedded")
    start.add_argument("--engine", choices=["embedded", "vllm"], default="embedded")
    start.add_argument("--threads", type=int, default=1)
    for name in ("overwatch", "top"):
        add_monitor_arguments(sub.add_parser(name, help="the Textual monitor of a running swarm"))
    scaffold = sub.add_parser("new-client", help="scaffold tutorial/opencode_build_NAME/ (see the SKILL.md)")
    scaffold.add_argument("name")
    scaffold.add_argument("--root", default=".")
    args = parser.parse_args(argv)
    if args.command in ("overwatch", "top"):
        run_monitor(args)
        return 0
    if args.command == "new-client":
        from ajet.scaffold import main as scaffold_main

        return scaffold_main([args.name, "--root", args.root])
    return run_swarm(args)


main = trainer_main

if __name__ == "__main__":
    sys.exit(trainer_main())
