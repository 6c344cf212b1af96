"""Stand-ins for verl's hybrid topology (`--engine hybrid`), behind the interfaces verl's driver calls.

verl's vLLM engines and its checkpoint engine need CUDA. These stand in for them so the real driver
code of the hybrid topology (`StoreFedTrainer.fit_step`: reward extraction, old log-probs, advantages,
balancing, update, weight sync, checkpoint, metrics) runs in CI:

- `ReplicaJournal` is the checkpoint-engine manager + LLM server manager: it records the sleep /
  weight-sync sequence and reports vLLM engine addresses; `HttpEngines` also drives real servers that
  speak vLLM's HTTP API (the vLLM stand-in): sleep before the update, wake up when weights are pushed;
- `CpuActorGroup` is a recording double of the actor worker group for these choreography tests and the
  driver's unit tests (it keeps what each `update_actor` received, which a Ray worker cannot show): a real
  tiny model with verl's policy loss. verl's real actor worker runs on CPU in
  `tests/e2e/test_verl_actor_cpu.py` and `tests/trainer/verl/test_verl_agreement.py` (no stand-in there).

`scripts/gpu_smoke.sh` runs the hybrid path with verl's real workers and vLLM on a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import torch
from verl.utils import tensordict_utils as tu

from ajet_trainer.grpo import Batch, loss_config, policy_loss, sequence_logprobs


def _padded(td: Any) -> Batch:
    """verl's worker input (nested input_ids) back to the padded layout of `ajet_trainer.grpo`."""
    prompts, responses, attn = td["prompts"], td["responses"], td["attention_mask"]
    input_ids = torch.cat([prompts, responses], dim=-1)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    adv = td["advantages"] if "advantages" in td.keys() else torch.zeros(responses.shape)
    return Batch(
        input_ids,
        attn,
        pos,
        responses,
        td["response_mask"].float(),
        adv,
        torch.zeros(responses.shape),
        prompts.shape[1],
    )


def _to_no_padding(per_token: torch.Tensor, attn: torch.Tensor, prompt_width: int) -> torch.Tensor:
    """[B, R] response values -> verl's nested layout: one value per valid token, shifted left by one."""
    rows = []
    for i in range(attn.shape[0]):
        p = int(attn[i, :prompt_width].sum())
        r = int(attn[i, prompt_width:].sum())
        row = torch.zeros(p + r)
        row[p - 1 : p + r - 1] = per_token[i, :r]
        rows.append(row)
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


class CpuActorGroup:
    """verl's actor worker group, on CPU: real forward/backward of a small model with verl's PPO-clip loss."""

    def __init__(self, model: Any, lr: float = 1e-3, clip_ratio: float = 0.2):
        self.model, self.cfg = model, loss_config(clip_ratio)
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
        self._dispatch_info: dict[str, list[int]] = {}
        self.seen: list[dict[str, Any]] = []
        """What each `update_actor` received (advantages, masks, old log-probs, uids)."""
        self.saved: list[tuple[str, int]] = []

    def _query_dispatch_info(self, role: str) -> list[int]:
        return [0]  # one data-parallel rank

    def compute_log_prob(self, td: Any) -> Any:
        batch = _padded(td)
        with torch.no_grad():
            logp, entropy = sequence_logprobs(self.model, batch, with_entropy=True)
        attn = td["attention_mask"]
        return tu.get_tensordict(
            {
                "log_probs": _to_no_padding(logp, attn, batch.prompt_width),
                "entropy": _to_no_padding(entropy, attn, batch.prompt_width),
            },
            non_tensor_dict={"metrics": {"mfu": 0.0}},
        )

    def update_actor(self, td: Any) -> Any:
        mini = tu.get_non_tensor_data(td, "mini_batch_size", None)
        assert td.batch_size[0] % mini == 0, f"verl's make_iterator: {td.batch_size[0]} % {mini} != 0"
        batch = _padded(td)
        self.seen.append(
            {
                "advantages": batch.advantages.clone(),
                "response_mask": batch.response_mask.clone(),
                "old_log_probs": td["old_log_probs"].clone(),
                "tokens": [row[m.bool()].tolist() for row, m in zip(batch.input_ids, batch.attention_mask)],
            }
        )
        self.model.train()
        logp, _ = sequence_logprobs(self.model, batch)
        loss, metrics = policy_loss(td["old_log_probs"], logp, batch, self.cfg, "token-mean")
        self.optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.model.eval()
        out = {
            "pg_loss": metrics["pg_loss"],
            "pg_clipfrac": metrics["clip_frac"],
            "grad_norm": float(grad_norm),
            "mfu": 0.0,
        }
        return tu.get_tensordict({"dummy": torch.zeros(1)}, non_tensor_dict={"metrics": out})

    def save_checkpoint(
        self, local_path: str, hdfs_path: Any = None, global_step: int = 0, max_ckpt_to_keep: Any = None
    ) -> None:
        Path(local_path).mkdir(parents=True, exist_ok=True)
        torch.save({k: v.detach() for k, v in self.model.state_dict().items()}, Path(local_path) / "model.pt")
        self.saved.append((local_path, global_step))

    def load_checkpoint(self, local_path: str, hdfs_path: Any = None, del_local_after_load: bool = False) -> None:
        self.model.load_state_dict(torch.load(Path(local_path) / "model.pt"))


class ReplicaJournal:
    """verl's checkpoint-engine manager and LLM server manager: vLLM engines that record what was asked of them."""

    def __init__(self, addresses: list[str]):
        self.addresses = addresses
        self.calls: list[str] = []

    def get_addresses(self) -> list[str]:
        return self.addresses

    def sleep_replicas(self) -> None:
        self.calls.append("sleep")

    def update_weights(self, global_steps: int = 0) -> dict[str, float]:
        self.calls.append(f"update_weights@{global_steps}")
        return {}


class HttpEngines(ReplicaJournal):
    """vLLM engines at `host:port` addresses, slept and woken over vLLM's HTTP API as verl does in-process."""

    def sleep_replicas(self) -> None:
        super().sleep_replicas()
        for addr in self.addresses:
            httpx.post(f"http://{addr}/sleep", params={"level": 1}, timeout=10).raise_for_status()

    def update_weights(self, global_steps: int = 0) -> dict[str, float]:
        out = super().update_weights(global_steps)
        for addr in self.addresses:
            httpx.post(f"http://{addr}/wake_up", timeout=10).raise_for_status()
        return out
