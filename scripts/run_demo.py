"""`make demo`: proxy + trainer (ajet-swarm) + the tiny-RL tutorial client, reward rising on CPU.

Starts `ajet-swarm start` on a free port with a fresh store and experiment folder under
`experiments/demo/`, runs `tutorial/example_tiny_rl/agent_roll.py` until the reward target, stops
the swarm, then takes the result away: the trained model exported as a Hugging Face folder
(`experiments/demo/model`), the curves drawn into `experiments/demo/reward.png`, and the TensorBoard
logs under the experiment. The client's JSON line is the last line of stdout.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import httpx

from ajet.utils.runtime import offline_env

REPO = Path(__file__).resolve().parents[1]
ENV = offline_env(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_swarm(root: Path, *extra: str) -> Iterator[str]:
    """`ajet-swarm start` on a free port with a fresh store and experiment folder under `root`; yields its URL."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(root / "swarm.log", "w")
    cmd = [
        str(Path(sys.executable).with_name("ajet-swarm")),
        "start",
        "--swarm-port",
        str(port),
        "--db",
        f"sqlite:///{root / 'ajet-swarm.db'}",
        "--experiment-dir",
        str(root / "experiment"),
        "--log-level",
        "warning",
        *extra,
    ]
    swarm = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=ENV, cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if swarm.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the swarm did not start:\n" + (root / "swarm.log").read_text()[-3000:])
            time.sleep(0.2)
        yield url
    finally:
        swarm.send_signal(signal.SIGINT)
        try:
            swarm.wait(60)
        except subprocess.TimeoutExpired:
            swarm.kill()
        log.close()


def run_tutorial(
    url: str, *args: str, capture: bool = False, timeout: Optional[float] = None
) -> "subprocess.CompletedProcess[str]":
    """`tutorial/example_tiny_rl/agent_roll.py` against the swarm at `url` (its output captured, or shown)."""
    return subprocess.run(
        [sys.executable, "-m", "tutorial.example_tiny_rl.agent_roll", "--swarm-url", url, *args],
        env=ENV,
        cwd=REPO,
        capture_output=capture,
        text=True,
        timeout=timeout,
    )


def tutorial_summary(root: Path, target: float, *args: str) -> dict[str, float]:
    """The tutorial's final JSON line from one run on a fresh swarm under `root` (and `reached`: 1.0 if its final
    reward is at least `target`); exits with the run's output when it fails."""
    with running_swarm(root) as url:
        out = run_tutorial(url, "--target", str(target), *args, capture=True, timeout=7200)
    if out.returncode != 0:
        raise SystemExit(f"{root.name} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return {**result, "reached": float(result["final_reward"] >= target)}


def main() -> int:
    root = REPO / "experiments" / "demo"
    try:
        with running_swarm(root) as url:
            client = run_tutorial(url, *sys.argv[1:])
    except RuntimeError as e:
        print(e)
        return 1
    exp = root / "experiment"
    if client.returncode == 0:
        bin_dir = Path(sys.executable).parent
        for cmd in (
            [bin_dir / "ajet-trainer", "export-model", "--experiment-dir", exp, "--out", root / "model"],
            [
                bin_dir / "ajet-proxy",
                "plot",
                "--db",
                f"sqlite:///{root / 'ajet-swarm.db'}",
                "--out",
                root / "reward.png",
            ],
        ):
            subprocess.run([str(c) for c in cmd], env=ENV, cwd=REPO, check=True, stdout=sys.stderr)
    print(
        f"model:       {root / 'model'}  (AutoModelForCausalLM.from_pretrained, vllm serve)\n"
        f"curves:      {root / 'reward.png'}\ntensorboard: tensorboard --logdir {exp / 'tensorboard'}\n"
        f"checkpoints: {exp / 'checkpoints'}\nmetrics:     {exp / 'metrics.jsonl'}\n"
        f"store:       {root / 'ajet-swarm.db'}\nserver log:  {root / 'swarm.log'}",
        file=sys.stderr,
    )
    return client.returncode


if __name__ == "__main__":
    sys.exit(main())
