"""Same batch, same loss: the embedded learner and verl's real actor (CPU platform, Ray) train the same thing.

One fixed batch (two GRPO groups of two episodes, rewards 0/1), trained twice (the second step is the
first with a KL term that is not 0: LoRA's adapter starts as the identity), the same start weights (for
LoRA: the adapter verl initialised, pulled into the embedded model), the same seed, learning rate and
loss settings, and the same truncated importance sampling against the batch's logged log-probs (`tis_cap`: verl
sets it for the whole run, the embedded learner for each batch that needs it, so the job sets it for both). verl's
side is its own driver step (`StoreFedTrainer.fit_step`: old log-probs, advantages,
`update_actor` on its FSDP2 actor worker); the embedded side is `Learner.update`.

Tolerances (fp32 on both sides; the two differ in kernels and reduction order only):
- advantages: 1e-6 absolute (the same function computes both);
- policy loss, KL loss, grad norm: 1e-4 relative + 1e-6 absolute;
- updated weights: 99.99% of the elements within 1e-6, every element within 5e-5. Adam's first step
  moves a weight by lr * g / (|g| + eps), about lr (1e-3 here) wherever |g| >> eps = 1e-8; where a
  gradient is itself near eps, float noise in g moves the step by a share of lr (measured: 1 element of
  95k at 2.5e-5, the median difference 0). A sign flip or a parameter left out shows as ~1e-3.
"""

import copy

import pytest
import torch

from ajet import AgentJetJob
from ajet_trainer.embedded.learner import Learner
from ajet_trainer.grpo import episode_advantages
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path
from ajet_trainer.types import EpisodeSample, TrainSequence
from tests.support.verl_actor import verl_cpu_trainer

pytestmark = pytest.mark.slow

REL, ABS = 1e-4, 1e-6
WEIGHT_CLOSE, WEIGHT_CLOSE_SHARE, WEIGHT_MAX = 1e-6, 0.9999, 5e-5


def _samples() -> list[EpisodeSample]:
    """Two tasks x two episodes, one 0 and one 1 reward in each group; responses of different lengths."""
    out = []
    for t, task in enumerate(("t0", "t1")):
        for k in range(2):
            uuid = f"{task}-{k}"
            prompt = tuple(10 + t * 7 + i for i in range(5 + t))
            response = tuple(40 + k * 3 + t + i for i in range(3 + k))
            out.append(
                EpisodeSample(
                    uuid,
                    task,
                    float(k),
                    (TrainSequence(uuid, task, prompt, response, (1,) * len(response), (-1.0,) * len(response)),),
                )
            )
    return out


def _job(lora_rank: int, tmp_path, ranks: int = 1) -> AgentJetJob:
    return AgentJetJob(
        model="builtin:tiny",
        n_gpu=ranks,
        batch_size=2,
        num_repeat=2,
        mini_batch_num=1,
        ppo_epochs=1,
        lr=1e-3,
        lora_rank=lora_rank,
        lora_alpha=16,
        use_kl_loss=lora_rank > 0,
        kl_loss_coef=0.1,
        tis_cap=2.0,
        save_freq=0,
        seed=0,
        max_prompt_length=32,
        max_response_length=32,
        max_model_len=128,
        ensure_new_experiment=True,
        experiment_dir=str(tmp_path / "exp"),
    )


STEPS = 2


def _verl_steps(job: AgentJetJob, samples, tmp_path):
    """verl's driver steps on `samples`: (its metrics per step, the advantages of the last step, the start and
    end weights)."""
    pulled: list[dict[str, torch.Tensor]] = []
    with verl_cpu_trainer(
        job, tmp_path / "exp", lambda w: pulled.append({k: v.clone() for k, v in w.items()})
    ) as trainer:
        seen = {}
        compute = trainer._fit_compute_advantage

        def record(batch):
            batch = compute(batch)
            seen["advantages"] = batch.batch["advantages"].clone()
            seen["response_mask"] = batch.batch["response_mask"].clone()
            return batch

        trainer._fit_compute_advantage = record
        metrics = [trainer.train_samples(samples) for _ in range(STEPS)]
    assert len(pulled) == 1 + STEPS, "the start weights, then each step's"
    return metrics, seen, pulled[0], pulled[-1]


def _embedded_steps(job: AgentJetJob, samples, start: dict[str, torch.Tensor]):
    from ajet_trainer.verl.beside import load_weights

    model, tokenizer = load_policy(str(builtin_model_path("builtin:tiny")), job, "cpu")
    load_weights(model, start)
    before = copy.deepcopy(model.state_dict())
    learner = Learner(model, tokenizer, job)
    metrics = [learner.update(samples, seed=job.seed + step) for step in range(STEPS)]
    return metrics, before, model


@pytest.fixture
def cpu_platform(monkeypatch):
    """verl's CPU platform for this test only: the environment it sets and verl's platform singleton restored."""
    from verl.plugin.platform import platform_manager

    from ajet_trainer.verl.cpu_platform import ENV

    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(platform_manager, "_current_platform", platform_manager._current_platform)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= ABS + REL * abs(b)


@pytest.mark.parametrize("lora_rank, ranks", [(0, 1), (4, 1), (0, 2)], ids=["full", "lora+kl", "full-2-ranks"])
def test_embedded_learner_and_verl_actor_compute_the_same_update(tmp_path, lora_rank, ranks, cpu_platform):
    """`ranks` 2: verl's FSDP2 shards the model over two gloo ranks (two Ray CPU workers)."""
    job, samples = _job(lora_rank, tmp_path, ranks), _samples()
    verl_steps, seen, start, verl_end = _verl_steps(job, samples, tmp_path)
    our_steps, before, model = _embedded_steps(job, samples, start)

    # advantages: one per episode, on its response tokens
    adv = episode_advantages(samples)
    trained = seen["response_mask"].bool()
    verl_adv = sorted(round(float(row[m][0]), 6) for row, m in zip(seen["advantages"], trained) if m.any())
    assert verl_adv == pytest.approx(sorted(adv.values()), abs=1e-6)

    # the loss terms
    pairs = {"pg_loss": "actor/pg_loss", "grad_norm": "actor/grad_norm"}
    if job.use_kl_loss:
        pairs["kl"] = "actor/kl_loss"
    for step, (ours, verl_metrics) in enumerate(zip(our_steps, verl_steps), start=1):
        for ours_key, verl_key in pairs.items():
            assert _close(verl_metrics[verl_key], ours[ours_key]), (
                step,
                ours_key,
                verl_metrics[verl_key],
                ours[ours_key],
            )
        assert ours["grad_norm"] > 0
    if job.use_kl_loss:
        assert our_steps[-1]["kl"] > 1e-9  # the KL term compared is not the trivial 0 of the first step

    # the updated weights: every exported tensor, element by element
    from ajet_trainer.verl.beside import load_weights

    ours_end = copy.deepcopy(model)
    load_weights(ours_end, verl_end)  # verl's result in our model's naming, then compare state dicts
    mine, theirs = model.state_dict(), ours_end.state_dict()
    moved = torch.cat([(mine[k] - before[k]).abs().flatten() for k in mine])
    assert float(moved.median()) > 5e-4 or lora_rank  # the step moved the weights (Adam's first step: ~lr)
    assert float(moved.max()) > 5e-4
    diff = torch.cat([(mine[k] - theirs[k]).abs().flatten() for k in mine])
    close = float((diff <= WEIGHT_CLOSE).float().mean())
    assert close >= WEIGHT_CLOSE_SHARE, f"only {close:.6f} of the weights agree within {WEIGHT_CLOSE}"
    assert float(diff.max()) <= WEIGHT_MAX, f"weights differ by up to {float(diff.max()):.2e} after one step"
    ours, verl_metrics = our_steps[-1], verl_steps[-1]
    print(
        f"agreement[{'lora' if lora_rank else 'full'}, {ranks} rank(s)]: pg_loss {ours['pg_loss']:.6g} vs "
        f"{verl_metrics['actor/pg_loss']:.6g}, grad_norm {ours['grad_norm']:.6g} vs "
        f"{verl_metrics['actor/grad_norm']:.6g}, kl {ours.get('kl')} vs {verl_metrics.get('actor/kl_loss')}, "
        f"weights within {WEIGHT_CLOSE}: {close:.6f} of {diff.numel()}, max diff {float(diff.max()):.2e}"
    )
