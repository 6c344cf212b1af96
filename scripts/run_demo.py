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
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping, Optional

from ajet_core.runtime import offline_env
from ajet_swarm.launch import launched_swarm

REPO = Path(__file__).resolve().parents[1]
ENV = offline_env(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))


@contextmanager
def running_swarm(root: Path, *extra: str, env: Optional[Mapping[str, str]] = None) -> Iterator[str]:
    """`ajet-swarm start` with a fresh store and experiment folder under `root` (`ajet_swarm.launch`); yields its
    URL. `env`: more environment for the swarm (the benchmarks' timing hooks)."""
    shutil.rmtree(root, ignore_errors=True)
    with launched_swarm(root, *extra, env={**ENV, **(env or {})}) as url:
        yield url


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


def tutorial_summary(
    root: Path, target: float, *args: str, env: Optional[Mapping[str, str]] = None
) -> dict[str, float]:
    """The tutorial's final JSON line from one run on a fresh swarm under `root` (and `reached`: 1.0 if its final
    reward is at least `target`); exits with the run's output when it fails."""
    with running_swarm(root, env=env) as url:
        out = run_tutorial(url, "--target", str(target), *args, capture=True, timeout=7200)
    (root / "client.log").write_text(out.stdout + out.stderr)  # the client's retries and warnings, kept
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
