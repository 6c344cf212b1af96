"""A real proxy in front of a real embedded engine whose answers a test scripts.

One of the two swarm harnesses (the other is `swarm.running_swarm`, with a real trainer): this one has no trainer
and takes no step, so a test sets what the policy says and checks how each API, framework and the token history
carry it, in seconds.

The engine runs in this process on the built-in tiny model wrapped in `ScriptedModel`, so a test says
what the policy will answer (text, a tool call) and checks how each API carries it: real HTTP, real
batching, sampling, ids and logprobs, real streaming, the proxy a real process on its own store.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Union

import torch

from ajet import AgentJetJob, SwarmClient, Task, WorkflowOutput
from ajet_store import Store, sqlite_url
from ajet_trainer.embedded.server import EmbeddedEngine
from ajet_trainer.grpo import collate, loss_config, policy_loss, sequence_logprobs
from ajet_trainer.policy import load_policy
from ajet_trainer.samples import assemble
from ajet_trainer.tiny_model import builtin_model_path
from tests.support.procs import Proc, start_proxy
from tests.support.rolling import ensure_rolling
from tests.support.scripted_model import ScriptedModel


@dataclass
class ScriptedSwarm:
    """What a test drives: the swarm client, the proxy, the store, and `answer(text)` (what the policy says next)."""

    client: SwarmClient
    proxy: Proc
    store: Store
    answer: Callable[..., None]
    """`answer(text, ...)`: what the policy says to the next requests, one each. A text is tokenized as the
    tokenizer splits it; a list of pieces is tokenized piece by piece (ids a BPE model may sample, though they
    are not the tokenizer's own split of the joined text)."""
    job: AgentJetJob
    model: torch.nn.Module
    """The tiny policy itself (not the scripted wrapper), to take a training step on what was logged."""
    pad_id: int
    tokenizer: Any = None
    """The policy's tokenizer."""

    def assert_episode_trains(self, uuid: str, reward: float = 1.0, min_calls: int = 1) -> None:
        """End the episode and check that it trains: in the rollout pool, assembled from its logged calls (every
        call with exact ids and a logprob per completion token), and one GRPO loss on it has a finite, non-zero
        gradient on the policy."""
        calls = self.store.calls(uuid)
        assert len(calls) >= min_calls, f"{len(calls)} calls logged"
        for c in calls:
            assert c.error is None and c.prompt_ids and c.completion_ids, c
            assert c.logprobs is not None and len(c.logprobs) == len(c.completion_ids)
        result = self.client.end_episode(Task(task_id="framework"), uuid, WorkflowOutput(reward=reward))
        assert result.warning is None, result.warning
        pool = [p for p in self.store.pool_episodes() if p.uuid == uuid]
        assert pool, "the episode is not in the rollout pool"
        samples, stats = assemble(self.store.rewarded_episodes(pool), 10_000, 10_000)
        assert stats.calls == len(calls) and samples and samples[0].sequences
        trained = sum(sum(s.response_mask) for s in samples[0].sequences)
        assert trained == sum(len(c.completion_ids) for c in calls)  # every sampled token is trained
        batch = collate([(s, 1.0) for s in samples[0].sequences], self.pad_id)
        self.model.zero_grad()
        logp, _ = sequence_logprobs(self.model, batch)
        loss, _ = policy_loss(batch.rollout_logprobs, logp, batch, loss_config(0.2), "token-mean")
        loss.backward()
        grad = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in self.model.parameters() if p.grad is not None))
        assert math.isfinite(float(loss.detach())) and math.isfinite(grad) and grad > 0
        self.model.zero_grad()


def script_ids(tok: Any, text: Union[str, list[str]]) -> list[int]:
    """The token ids a script says: a text as the tokenizer splits it, or pieces tokenized one by one; then EOS."""
    pieces = [text] if isinstance(text, str) else text
    return [i for p in pieces for i in tok.encode(p, add_special_tokens=False)] + [tok.eos_token_id]


@contextlib.contextmanager
def scripted_swarm(
    tmp: Path,
    max_tokens_cap: int = 96,
    model_name: str = "builtin:tiny",
    proxy_args: tuple[str, ...] = (),
    **job_fields: object,
) -> Iterator[ScriptedSwarm]:
    """Start the engine and the proxy (with `proxy_args`) on `model_name`, go ROLLING with a job of `job_fields`;
    stop both at the end."""
    job = AgentJetJob(
        model=model_name, batch_size=1, num_repeat=2, max_response_length_in_one_turn=max_tokens_cap, **job_fields
    )
    model, tok = load_policy(str(builtin_model_path(model_name)), AgentJetJob(), "cpu")
    wrapped = ScriptedModel(model, [])
    engine = EmbeddedEngine(  # the job's limits, as the trainer's serving sets them
        wrapped,
        tok,
        max_tokens_cap=max_tokens_cap,
        max_prompt_tokens=job.max_prompt_length,
        max_context=job.max_model_len,
        batch_window_s=0.0,
    )
    base = engine.start()[: -len("/v1")]
    db = sqlite_url(tmp / "scripted.db")
    store = Store(db)
    proxy = start_proxy(tmp, db, *proxy_args)
    client = SwarmClient(proxy.url)

    def answer(*texts: Union[str, list[str]]) -> None:
        wrapped.reset(*(script_ids(tok, t) for t in texts))

    try:
        ensure_rolling(client, store, base, job=job)
        yield ScriptedSwarm(client, proxy, store, answer, job, model, tok.pad_token_id, tok)
    finally:
        client.close()
        proxy.close()
        store.close()
        engine.stop()
