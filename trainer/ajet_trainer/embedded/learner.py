"""The embedded backend's learner: one-process PyTorch (+ peft for LoRA) on CPU or one GPU.

`Learner.update` runs one GRPO step on assembled samples: recompute old log-probs, then `ppo_epochs`
passes over `mini_batch_num` mini-batches with verl's policy loss (and KL loss), AdamW, gradient
clipping. The model it trains is the one the embedded engine serves, so new weights are live as soon
as the step finishes; the caller holds the engine's `weights_lock` around it.
"""

from __future__ import annotations

import copy
import logging
import statistics
import time
from typing import Any, Optional, Sequence

import torch

from ajet.job import AgentJetJob
from ajet_trainer.correction import tis_cap
from ajet_trainer.dpo import dpo_loss, episode_logprob, preference_pairs
from ajet_trainer.embedded.adapters import adapter_parameters, training
from ajet_trainer.freed_memory import give_back_freed_memory
from ajet_trainer.grpo import (
    Batch,
    collate,
    episode_advantages,
    imitation_advantages,
    loss_config,
    loss_norm,
    masked_max,
    masked_mean,
    micro_batches,
    policy_loss,
    sequence_logprobs,
    tis_weights,
)
from ajet_trainer.samples import canonical_order, flatten
from ajet_trainer.types import EpisodeSample, PolicyModel, Tokenizer
from ajet_trainer.vision import ImageReader

logger = logging.getLogger(__name__)


def _aggregated(agg: dict[str, list[float]]) -> dict[str, float]:
    """The mini-batches' metrics averaged, and how many were skipped (a non-finite loss or gradient)."""
    skipped = agg.pop("skipped", [])
    out = {k: statistics.fmean(v) for k, v in agg.items() if v}
    out["skipped_minibatches"] = float(len(skipped))
    if skipped:
        logger.warning(
            "%d of %d mini-batch update(s) skipped: non-finite loss or gradient (weights kept)",
            len(skipped),
            len(skipped) + len(agg.get("loss", [])),
        )
    return out


def _token_weighted(parts: Sequence[tuple[float, dict[str, float]]]) -> dict[str, float]:
    """Micro-batches' metrics as one mini-batch's: each averaged with its micro-batch's trained tokens as weight,
    except the loss parts, which add up (each is already its share of the mini-batch's)."""
    total = sum(w for w, _ in parts) or 1.0
    out: dict[str, float] = {}
    for w, m in parts:
        for k, v in m.items():
            share = 1.0 if k in ("pg_loss", "kl") else w / total
            out[k] = out.get(k, 0.0) + share * float(v)
    return out


def reward_stats(rewards: Sequence[float]) -> tuple[float, float]:
    """Mean and population std of the rewards, computed scaled so that huge values cannot overflow."""
    scale = max((abs(r) for r in rewards), default=0.0) or 1.0
    scaled = [r / scale for r in rewards]
    return statistics.fmean(scaled) * scale, statistics.pstdev(scaled) * scale


class Learner:
    """Optimizer and update step for one policy model, or for one LoRA adapter of several on a model (`adapter`:
    its parameters alone, its own optimizer; the other adapters' weights and optimizers are not touched)."""

    def __init__(self, model: PolicyModel, tokenizer: Tokenizer, job: AgentJetJob, adapter: Optional[str] = None):
        self.model, self.tokenizer, self.job, self.adapter = model, tokenizer, job, adapter
        if adapter is None:
            self.params = [p for p in model.parameters() if p.requires_grad]
        else:
            self.params = adapter_parameters(model, adapter)
        self.optimizer = torch.optim.AdamW(self.params, lr=job.lr, weight_decay=0.0)
        self.cfg = loss_config(job.clip_ratio, job.clip_ratio_high)
        self.lora = job.uses_lora
        self.preferring = job.replay is not None and job.replay.train == "dpo"
        """A DPO replay: each step trains pairs (`dpo.py`), not GRPO groups."""
        self.ref_model: Optional[PolicyModel] = None
        if (job.use_kl_loss or self.preferring) and not self.lora:  # LoRA's reference: the adapter off
            self.ref_model = copy.deepcopy(model).requires_grad_(False)
        self.device = next(model.parameters()).device
        self.images: Optional[ImageReader] = None
        """A VL model's images, read back from the store (the session sets it; None for a text model)."""

    def _ref_logprobs(self, batch: Batch) -> Optional[torch.Tensor]:
        return self._reference_logprobs(batch) if self.job.use_kl_loss else None

    def _reference_logprobs(self, batch: Batch) -> torch.Tensor:
        """The reference policy's log-probs of `batch`'s response tokens: the adapter off (LoRA), else the copy of
        the model the session started from."""
        if self.lora:
            with self.model.disable_adapter():
                return self._logprobs(self.model, batch)
        assert self.ref_model is not None
        return self._logprobs(self.ref_model, batch)

    def update(self, samples: Sequence[EpisodeSample], seed: int = 0, lagged: bool = False) -> dict[str, float]:
        """One GRPO step; returns its metrics. `lagged`: some samples come from an older policy than the one being
        updated (a synchronous job's leftovers): the loss corrects them as an asynchronous job's (`tis_cap`)."""
        try:
            with training(self.model, self.adapter):
                if self.preferring:
                    return self._preference_update(samples)
                return self._update(samples, seed, lagged)
        finally:
            if self.images is not None:  # the step's decoded files: a DPO step's pairs read them too
                self.images.forget()
            give_back_freed_memory()  # the step's activations, held at its peak until the next step otherwise

    def _preference_update(self, samples: Sequence[EpisodeSample]) -> dict[str, float]:
        """One DPO step over the batch's pairs (`dpo.py`): each pair's loss backed into one gradient, one step."""
        t0 = time.perf_counter()
        assert self.job.replay is not None
        pairs, agg = preference_pairs(canonical_order(samples)), {}
        self.optimizer.zero_grad(set_to_none=True)
        for chosen, rejected in pairs:
            (pol_c, ref_c), (pol_r, ref_r) = self._episode_logprobs(chosen), self._episode_logprobs(rejected)
            loss, m = dpo_loss(pol_c, pol_r, ref_c, ref_r, self.job.replay.beta)
            (loss / len(pairs)).backward()
            for k, v in {**m, "loss": float(loss.detach())}.items():
                agg.setdefault(k, []).append(v)
        if pairs:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.job.grad_clip)
            if torch.isfinite(grad_norm):
                self.optimizer.step()
            else:  # a poisoned batch must not reach the weights
                agg["skipped"] = [1.0]
            self.optimizer.zero_grad(set_to_none=True)
        trained = sum(int(s.response_mask.count(1)) for ep in samples for s in ep.sequences)
        metrics = {"pairs": float(len(pairs)), "episodes": float(len(samples)), "trained_tokens": float(trained)}
        metrics["reward_mean"] = reward_stats([s.reward for s in samples])[0] if samples else 0.0
        return {**metrics, **_aggregated(agg), "update_s": time.perf_counter() - t0}

    def _episode_logprobs(self, ep: EpisodeSample) -> tuple[torch.Tensor, torch.Tensor]:
        """An episode's log-likelihood under the policy (with its gradient) and under the reference."""
        batch = collate([(s, 0.0) for s in ep.sequences], self.tokenizer.pad_token_id, self.images).to(self.device)
        policy = episode_logprob(sequence_logprobs(self.model, batch)[0], batch.response_mask)
        return policy, episode_logprob(self._reference_logprobs(batch), batch.response_mask)

    def _update(self, samples: Sequence[EpisodeSample], seed: int, lagged: bool) -> dict[str, float]:
        t0 = time.perf_counter()
        samples = canonical_order(samples)  # arrival order must not change the update
        imitating = self.job.replay is not None and self.job.replay.train == "sft"
        adv = imitation_advantages(samples) if imitating else episode_advantages(samples)
        items = flatten(samples, adv)
        batch = collate(items, self.tokenizer.pad_token_id, self.images).to(self.device)
        # Old log-probs: with one epoch and one mini-batch the policy has not moved when the loss is
        # computed, so the training forward pass itself yields them (one pass saved, same numbers).
        single_pass = self.job.ppo_epochs == 1 and self.job.mini_batch_num == 1
        old_logp = None
        if not single_pass:
            old_logp = self._logprobs(self.model, batch)
        mean, std = reward_stats([s.reward for s in samples])
        metrics: dict[str, Any] = {
            "reward_mean": mean,
            "reward_std": std,
            "episodes": len(samples),
            "sequences": len(items),
            "tokens": int(batch.attention_mask.sum()),
            "trained_tokens": int(batch.response_mask.sum()),
        }
        agg: dict[str, list[float]] = {}
        norm = None
        if single_pass and not self.job.use_kl_loss and self.job.entropy_coeff == 0:
            # A sequence whose advantage is 0 adds nothing to the gradient here, only its tokens to the loss's
            # divisor: the update passes over the others alone, divided as the whole batch would be (same step).
            keep = (batch.advantages != 0).any(-1)
            metrics["sequences_without_signal"] = int((~keep).sum())
            if not keep.all():
                norm = loss_norm(batch.response_mask)
                batch = batch.select(keep.nonzero().squeeze(-1))
        if len(batch) == 0:
            self._zero_gradient_step()
            metrics.update(_aggregated(agg))
            metrics["update_s"] = time.perf_counter() - t0
            return metrics
        metrics["update_tokens"] = int(batch.attention_mask.sum())  # what its passes run (bench/real_model_profile)
        cap = None if imitating else tis_cap(self.job, lagged)  # imitation takes the stored tokens as they are
        old_logp = self._epochs(batch, old_logp, self._ref_logprobs(batch), seed, agg, cap, norm)
        gap = (old_logp - batch.rollout_logprobs).abs()  # the engine's numbers vs the trainer's, same tokens
        metrics["logprob_gap"] = masked_mean(gap, batch.response_mask)
        metrics["logprob_gap_max"] = masked_max(gap, batch.response_mask)
        metrics.update(_aggregated(agg))
        metrics["update_s"] = time.perf_counter() - t0
        return metrics

    def _epochs(
        self,
        batch: Batch,
        old_logp: Optional[torch.Tensor],
        ref_logp: Optional[torch.Tensor],
        seed: int,
        agg: Any,
        cap: Optional[float],
        norm: Optional[dict[str, int]] = None,
    ) -> torch.Tensor:
        """`ppo_epochs` passes over `mini_batch_num` mini-batches (a seeded shuffle); returns the old log-probs (the
        first pass's, when there is one pass only)."""
        single_pass = old_logp is None
        gen = torch.Generator().manual_seed(seed)
        for _epoch in range(self.job.ppo_epochs):
            order = torch.arange(len(batch)) if single_pass else torch.randperm(len(batch), generator=gen)
            for idx in torch.chunk(order, min(self.job.mini_batch_num, len(batch))):
                idx_d = idx.to(self.device)
                old = self._mini_step(
                    batch.select(idx_d),
                    None if single_pass or old_logp is None else old_logp[idx_d],
                    None if ref_logp is None else ref_logp[idx_d],
                    agg,
                    cap,
                    norm,
                )
                if single_pass:
                    old_logp = old
        assert old_logp is not None
        return old_logp

    def _logprobs(self, model: PolicyModel, batch: Batch) -> torch.Tensor:
        """Log-probs of `batch`'s response tokens without gradients, one micro-batch at a time."""
        parts = micro_batches(len(batch), batch.input_ids.shape[1], self.job.micro_batch_tokens)
        with torch.no_grad():
            return torch.cat([sequence_logprobs(model, batch.select(idx.to(self.device)))[0] for idx in parts])

    def _mini_step(
        self,
        mb: Batch,
        old_logp: Optional[torch.Tensor],
        ref_logp: Optional[torch.Tensor],
        agg: dict[str, list[float]],
        cap: Optional[float],
        norm: Optional[dict[str, int]] = None,
    ) -> torch.Tensor:
        """One optimizer step over `mb`, its gradients accumulated over micro-batches (`cap`: the behaviour-policy
        correction's, None: off; `norm`: the loss's divisors when `mb` is part of the batch they count, else its
        own); returns the log-probs it computed before stepping (detached)."""
        self.optimizer.zero_grad(set_to_none=True)
        norm, logps, parts = norm or loss_norm(mb.response_mask), [], []
        for idx in micro_batches(len(mb), mb.input_ids.shape[1], self.job.micro_batch_tokens):
            idx = idx.to(self.device)
            part = mb.select(idx)
            old = None if old_logp is None else old_logp[idx]
            ref = None if ref_logp is None else ref_logp[idx]
            logp, loss, m = self._micro_loss(part, old, ref, cap, norm)
            loss.backward()
            logps.append(logp)
            parts.append((loss.detach(), float(part.response_mask.sum()), m))
        loss = torch.stack([p[0] for p in parts]).sum()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.job.grad_clip)
        if not (torch.isfinite(loss) and torch.isfinite(grad_norm)):  # a poisoned batch must not reach the weights
            self.optimizer.zero_grad(set_to_none=True)
            agg.setdefault("skipped", []).append(1.0)
            return torch.cat(logps)
        self.optimizer.step()
        m = _token_weighted([(w, m) for _, w, m in parts])
        m.update(loss=float(loss), grad_norm=float(grad_norm))
        for k, v in m.items():
            agg.setdefault(k, []).append(v)
        return torch.cat(logps)

    def _zero_gradient_step(self) -> None:
        """The step of a batch without any signal: a zero gradient, which AdamW still steps on (its momentum moves
        the weights as it would have after a pass over the batch)."""
        for p in self.params:
            p.grad = torch.zeros_like(p)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _micro_loss(
        self,
        part: Batch,
        old_logp: Optional[torch.Tensor],
        ref_logp: Optional[torch.Tensor],
        cap: Optional[float],
        norm: dict[str, int],
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """One micro-batch's log-probs (detached), its share of the mini-batch's loss, and its metrics."""
        logp, entropy = sequence_logprobs(self.model, part, with_entropy=True)
        if old_logp is None:
            old_logp = logp.detach()
        is_w, is_m = None, {}
        if cap is not None:
            is_w, is_m = tis_weights(old_logp, part.rollout_logprobs, part.response_mask, cap)
        job = self.job
        loss, m = policy_loss(
            old_logp, logp, part, self.cfg, job.loss_agg_mode, ref_logp, job.kl_loss_coef, job.kl_loss_type, is_w,
            entropy, job.entropy_coeff, norm,
        )  # fmt: skip
        m.update(is_m)
        assert entropy is not None
        m["entropy"] = masked_mean(entropy.detach(), part.response_mask)
        return logp.detach(), loss, m
