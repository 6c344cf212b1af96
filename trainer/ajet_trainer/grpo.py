"""GRPO pieces built on verl's algorithms (`verl.trainer.ppo.core_algos`), as pure tensor functions.

- `episode_advantages`: one advantage per episode from verl's `compute_grpo_outcome_advantage`,
  grouped by `task_id`; every sequence of the episode gets it.
- `collate`: sequences -> verl's batch layout (left-padded prompts, right-padded responses).
- `sequence_logprobs`: log-prob and entropy of each response token under a model.
- `policy_loss`: verl's `get_policy_loss_fn("vanilla")` (+ optional KL loss with `kl_penalty`/`agg_loss`).
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch
from omegaconf import OmegaConf

from ajet_trainer.types import EpisodeSample, PolicyModel, TrainSequence
from ajet_trainer.verl_algos import verl_module
from ajet_trainer.vision import ImageInputs, joined, multimodal_positions


@functools.cache
def core_algos() -> types.ModuleType:
    """verl's `core_algos`, imported at the first step that needs it, not at the trainer's start: verl brings
    tensordict and torch's compiler (about 7 s of CPU on 2 cores), which a trainer that only serves never uses.
    Importable without Ray (`verl_algos`)."""
    return verl_module("verl.trainer.ppo.core_algos")


def episode_advantages(
    samples: Sequence[EpisodeSample], norm_by_std: bool = True, epsilon: float = 1e-6
) -> dict[str, float]:
    """GRPO advantage of each episode (by uuid), computed by verl on one row per episode."""
    if not samples:
        return {}
    rewards = torch.tensor([[s.reward] for s in samples], dtype=torch.float32)
    mask = torch.ones_like(rewards)
    index = np.array([s.task_id for s in samples], dtype=object)
    adv, _ = core_algos().compute_grpo_outcome_advantage(
        rewards, mask, index, epsilon=epsilon, norm_adv_by_std_in_grpo=norm_by_std
    )
    return {s.episode_uuid: float(adv[i, 0]) for i, s in enumerate(samples)}


def imitation_advantages(samples: Sequence[EpisodeSample]) -> dict[str, float]:
    """Advantage 1 for every episode: the policy loss's gradient at ratio 1 is then the negative log-likelihood's
    over the model's own tokens (supervised fine-tuning on them, with GRPO's masks)."""
    return {s.episode_uuid: 1.0 for s in samples}


@dataclass
class Batch:
    """verl's layout: `input_ids = cat(prompts, responses)`; R = response width, P = prompt width."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    responses: torch.Tensor
    response_mask: torch.Tensor
    advantages: torch.Tensor
    rollout_logprobs: torch.Tensor
    prompt_width: int
    images: tuple[Optional[ImageInputs], ...] = ()
    """Each row's images (a VL model's; empty: none has any), whose runs are in its `input_ids`."""

    def to(self, device: Union[str, torch.device]) -> "Batch":
        return Batch(
            *(
                t.to(device)
                for t in (
                    self.input_ids,
                    self.attention_mask,
                    self.position_ids,
                    self.responses,
                    self.response_mask,
                    self.advantages,
                    self.rollout_logprobs,
                )
            ),
            self.prompt_width,
            self.images,
        )

    def select(self, idx: torch.Tensor) -> "Batch":
        return Batch(
            self.input_ids[idx],
            self.attention_mask[idx],
            self.position_ids[idx],
            self.responses[idx],
            self.response_mask[idx],
            self.advantages[idx],
            self.rollout_logprobs[idx],
            self.prompt_width,
            tuple(self.images[i] for i in idx.tolist()) if self.images else (),
        )

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def collate(
    items: Sequence[tuple[TrainSequence, float]],
    pad_id: int,
    images: Optional[Callable[[TrainSequence], Optional[ImageInputs]]] = None,
) -> Batch:
    """Sequences with their advantages -> one padded batch (advantage broadcast over response tokens); `images`
    gives a sequence's images (a VL model's learner reads them back from the store)."""
    P = max(len(s.prompt_ids) for s, _ in items)
    R = max(len(s.response_ids) for s, _ in items)
    B = len(items)
    input_ids = torch.full((B, P + R), pad_id, dtype=torch.long)
    attn = torch.zeros((B, P + R), dtype=torch.long)
    rmask = torch.zeros((B, R), dtype=torch.float32)
    adv = torch.zeros((B, R), dtype=torch.float32)
    rlp = torch.zeros((B, R), dtype=torch.float32)
    for i, (s, a) in enumerate(items):
        p, r = len(s.prompt_ids), len(s.response_ids)
        input_ids[i, P - p : P] = torch.tensor(s.prompt_ids)
        input_ids[i, P : P + r] = torch.tensor(s.response_ids)
        attn[i, P - p : P + r] = 1
        rmask[i, :r] = torch.tensor(s.response_mask, dtype=torch.float32)
        adv[i, :r] = a
        rlp[i, :r] = torch.tensor(s.rollout_logprobs, dtype=torch.float32)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # left padding must not shift positions
    rows = tuple(images(s) for s, _ in items) if images is not None else ()
    return Batch(input_ids, attn, pos, input_ids[:, P:], rmask, adv * rmask, rlp, P, rows)


def sequence_logprobs(
    model: PolicyModel, batch: Batch, with_entropy: bool = False
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Log-prob of every response token [B, R] (and the entropy of each position). Only the positions that predict
    a response token go through the output layer (`logits_to_keep`): a real vocabulary's logits over the prompt
    would take most of an update's memory."""
    R = batch.responses.shape[1]
    positions, seen = batch.position_ids, {}
    inputs = joined(batch.images)
    if inputs is not None:  # the pixels the engine saw, at the model's multimodal positions
        positions = multimodal_positions(model, batch.input_ids, batch.attention_mask, inputs.grid_thw)
        device = batch.input_ids.device
        seen = {"pixel_values": inputs.pixel_values.to(device), "image_grid_thw": inputs.grid_thw.to(device)}
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=positions,
        use_cache=False,
        logits_to_keep=R + 1,
        **seen,
    )
    logits = out.logits[:, :R, :].float()  # positions P-1 .. P+R-2 predict the R response tokens
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = torch.gather(logp_all, -1, batch.responses.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, entropy


def micro_batches(rows: int, width: int, budget: int) -> list[torch.Tensor]:
    """The row indices of each micro-batch of a `rows` x `width` batch: consecutive rows, at most `budget` tokens
    (`rows x width`) each, at least one row."""
    per = max(1, budget // max(1, width))
    return list(torch.arange(rows).split(per))


def loss_norm(response_mask: torch.Tensor) -> dict[str, int]:
    """What verl's `agg_loss` divides by, taken over a whole mini-batch, so that the losses of its micro-batches
    add up to the mini-batch's loss (its `global_batch_info`): the trained tokens and the sequences holding any."""
    return {
        "batch_num_tokens": int(response_mask.sum()),
        "global_batch_size": int((response_mask.sum(-1) > 0).sum()),
    }


def loss_config(clip_ratio: float, clip_ratio_high: Optional[float] = None) -> Any:
    """The actor config verl's vanilla policy loss reads (`clip_ratio_high`: the upper bound when it differs)."""
    return OmegaConf.create(
        {
            "clip_ratio": clip_ratio,
            "clip_ratio_low": None,
            "clip_ratio_high": clip_ratio_high,
            "clip_ratio_c": 3.0,
            "global_batch_info": {},
        }
    )


def policy_loss(
    old_logp: torch.Tensor,
    logp: torch.Tensor,
    batch: Batch,
    cfg: Any,
    loss_agg_mode: str,
    ref_logp: Optional[torch.Tensor] = None,
    kl_coef: float = 0.0,
    kl_type: str = "low_var_kl",
    is_weights: Optional[torch.Tensor] = None,
    entropy: Optional[torch.Tensor] = None,
    entropy_coeff: float = 0.0,
    norm: Optional[dict[str, int]] = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's vanilla PPO-clip loss (per-token `is_weights` when given), plus `kl_coef` x verl's KL loss against
    `ref_logp` when given, minus `entropy_coeff` x the aggregated token `entropy` (as verl's actor does). `norm`:
    the mini-batch's `loss_norm` when `batch` is one micro-batch of it (None: `batch` is the whole mini-batch)."""
    norm = norm or {}
    if norm:
        cfg = OmegaConf.merge(cfg, {"global_batch_info": norm})
    loss_fn = core_algos().get_policy_loss_fn("vanilla")
    pg_loss, pg_metrics = loss_fn(
        old_log_prob=old_logp,
        log_prob=logp,
        advantages=batch.advantages,
        response_mask=batch.response_mask,
        loss_agg_mode=loss_agg_mode,
        config=cfg,
        rollout_is_weights=is_weights,
    )
    metrics = {
        "pg_loss": float(pg_loss.detach()),
        "clip_frac": pg_metrics["actor/pg_clipfrac"],
        "ppo_kl": pg_metrics["actor/ppo_kl"],
    }
    loss = pg_loss
    if ref_logp is not None:
        kld = core_algos().kl_penalty(logprob=logp, ref_logprob=ref_logp, kl_penalty=kl_type)
        kl_loss = core_algos().agg_loss(kld, batch.response_mask, loss_agg_mode, **norm)
        loss = loss + kl_coef * kl_loss
        metrics["kl"] = float(kl_loss.detach())
    if entropy is not None and entropy_coeff > 0:
        ent = core_algos().agg_loss(entropy, batch.response_mask, loss_agg_mode, **norm)
        loss = loss - entropy_coeff * ent
    return loss, metrics


def tis_weights(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, cap: float
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated importance-sampling weights min(pi_old / pi_engine, cap) per token (verl's rollout correction),
    and their mean, max and the share of tokens capped."""
    compute_rollout_correction_weights = verl_module(
        "verl.trainer.ppo.rollout_corr_helper"
    ).compute_rollout_correction_weights

    log_ratio = (old_logp - rollout_logp).detach()
    weights, m = compute_rollout_correction_weights(log_ratio, mask, rollout_is="token", rollout_is_threshold=cap)
    return weights, {
        "tis_weight_mean": m["rollout_is_mean"],
        "tis_weight_max": m["rollout_is_max"],
        "tis_capped_share": m["rollout_is_ratio_fraction_high"],
    }


def masked_max(x: torch.Tensor, mask: torch.Tensor) -> float:
    """Largest `x` over `mask` (0.0 when empty)."""
    return float(x.masked_fill(mask == 0, float("-inf")).max()) if mask.any() else 0.0


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean of `x` over `mask` (0.0 when empty)."""
    n = mask.sum()
    return float((x * mask).sum() / n) if n > 0 else 0.0
