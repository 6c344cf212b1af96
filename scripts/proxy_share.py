"""The proxy's share of rollout throughput: the embedded engine's generation with N concurrent agents, direct, then
the same agents through `ajet-proxy` with episode keys and every call logged. Run by `scripts/gpu_check.sh`.

    python scripts/proxy_share.py --device cuda --model qwen2.5-0.5b-shape --out gpu_check.jsonl
    python scripts/proxy_share.py --device cpu --model builtin:tiny --agents 8 --calls 2 --max-tokens 8   # dry run

`qwen2.5-0.5b-shape` is a random model of Qwen2.5-0.5B's shape (24 layers, hidden 896, 14 heads / 2 KV heads,
151,936 tokens, tied embeddings) in bf16, built here without a download; its tokenizer is the built-in BPE one
padded with added tokens to the same vocabulary, so every sampled id decodes. Each agent makes `--calls` calls
of `--max-tokens` tokens in one growing conversation (the token history's path); direct and proxied runs are
repeated `--repeats` times, interleaved, and reported as median and range. One JSON line per figure, stamped with
the commit, date, machine, torch and device, also appended to `--out`; the goal is a proxy share under 2% of
tokens/s. The share is signed: a negative one says the proxied runs were faster, which is noise of that size.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ajet_core.runtime import apply_offline_env  # noqa: E402

apply_offline_env()

import httpx  # noqa: E402
import torch  # noqa: E402

from ajet.job import AgentJetJob  # noqa: E402
from ajet.types import ExperimentState  # noqa: E402
from ajet_store import Store, sqlite_url  # noqa: E402
from ajet_store.types import RegisteredEngine  # noqa: E402
from ajet_trainer.embedded.server import EmbeddedEngine  # noqa: E402
from scripts import stamp as stamping  # noqa: E402
from scripts.source_tree import pythonpath  # noqa: E402

QWEN_SHAPE = "qwen2.5-0.5b-shape"
ENGINE_KEY = "gpu-check-engine-key"
REPO = Path(__file__).resolve().parents[1]


def qwen_shaped(device: str) -> tuple[Any, Any]:
    """A random Qwen2.5-0.5B-shaped model in bf16 and a tokenizer of its vocabulary size."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from ajet_trainer.tiny_model import builtin_model_path

    tok = AutoTokenizer.from_pretrained(str(builtin_model_path("builtin:tiny-bpe")))
    vocab = 151_936
    tok.add_tokens([f"<|r{i}|>" for i in range(vocab - len(tok))])
    shape = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, max_position_embeddings=32768, tie_word_embeddings=True)  # fmt: skip
    config = Qwen2Config(vocab_size=vocab, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, **shape)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval()
    return model, tok


def load(model_name: str, device: str) -> tuple[Any, Any]:
    if model_name == QWEN_SHAPE:
        return qwen_shaped(device)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ajet_trainer.tiny_model import resolve_model_path  # not the learner: it imports verl, and verl Ray

    path = str(resolve_model_path(model_name))
    return AutoModelForCausalLM.from_pretrained(path).to(device).eval(), AutoTokenizer.from_pretrained(path)


async def agents(url: str, n: int, calls: int, max_tokens: int, keys: Optional[list[str]]) -> tuple[int, float]:
    """`n` agents, `calls` turns each; (completion tokens, seconds). `keys`: each agent's bearer key (its episode's
    through the proxy, the engine's own direct)."""

    async def agent(http: httpx.AsyncClient, i: int) -> int:
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"Agent {i}: tell me a story."}]
        headers = {"Authorization": f"Bearer {keys[i]}"} if keys else {}
        got = 0
        for turn in range(calls):
            body = {"model": "policy", "messages": messages, "max_tokens": max_tokens, "temperature": 1.0}
            r = await http.post(f"{url}/chat/completions", json=body, headers=headers)
            r.raise_for_status()
            answer = r.json()
            got += int(answer["usage"]["completion_tokens"])
            messages += [{"role": "assistant", "content": answer["choices"][0]["message"]["content"] or ""},
                         {"role": "user", "content": f"Go on ({turn})."}]  # fmt: skip
        return got

    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=n + 8)) as http:
        t0 = time.perf_counter()
        tokens = await asyncio.gather(*(agent(http, i) for i in range(n)))
        return sum(tokens), time.perf_counter() - t0


def start_proxy(db: str, work: Path) -> tuple[subprocess.Popen, str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(work / "proxy.log", "ab")
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    proc = subprocess.Popen([sys.executable, "-m", "ajet_proxy.cli", "start", "--db", db, "--port", str(port),
                             "--log-level", "warning"], stdout=log, stderr=subprocess.STDOUT, env=env)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"the proxy did not start: {(work / 'proxy.log').read_text()[-2000:]}")


def rolling(store: Store, engine_url: str, api_key: str, model: str) -> None:
    """What the trainer does at boot: the job synced, the engine registered, ROLLING, a heartbeat."""
    store.sync_job(AgentJetJob(model=model, batch_size=1_000_000, num_repeat=1))  # never a full batch
    store.start()
    store.register_engines([RegisteredEngine("embedded-0", engine_url, "policy", 0, api_key)])
    store.transition(ExperimentState.ROLLING, allowed_from=[ExperimentState.BOOTING])
    store.heartbeat()


def stamp(device: str) -> dict[str, Any]:
    """What every row of this script carries, written by the script itself: `scripts.stamp.stamp()` (commit, date,
    machine, command), torch's version and the device's name."""
    name = torch.cuda.get_device_name() if device.startswith("cuda") else stamping.machine()
    return {**stamping.stamp(), "torch": torch.__version__, "device_name": name}


def spread(values: list[float]) -> dict[str, float]:
    """The median of repeated measurements and their range, signed as measured (never clamped)."""
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4), "max": round(max(values), 4)}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--model", default=QWEN_SHAPE)
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3, help="direct and proxied runs, interleaved")
    ap.add_argument("--out", default=None)
    return ap


def main() -> None:
    args = parser().parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible")
    stamped = stamp(args.device)

    def emit(**kw: Any) -> None:
        line = json.dumps({"bench": "proxy_share", "device": args.device, "model": args.model, **kw, **stamped})
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(line + "\n")

    t0 = time.perf_counter()
    model, tok = load(args.model, args.device)
    emit(figure="load_s", value=round(time.perf_counter() - t0, 2))
    engine = EmbeddedEngine(model, tok, max_tokens_cap=args.max_tokens, api_key=ENGINE_KEY)
    try:
        measure(engine, args, emit)
    finally:
        engine.stop()


def measure(engine: EmbeddedEngine, args: argparse.Namespace, emit: Callable[..., None]) -> None:
    """Tokens/s direct and through a proxy, `--repeats` times each, interleaved (a slow spell hits both), and the
    proxy's share of the difference: per repeat and of the medians, signed (a negative share is measured noise)."""
    url = engine.start()
    work = Path(tempfile.mkdtemp(prefix="ajet-gpu-check-"))
    db = sqlite_url(work / "store.db")
    store, proxy = Store(db), None
    try:
        asyncio.run(_warm(url))
        engine_keys = [ENGINE_KEY] * args.agents  # direct calls carry the engine's key, as the proxy's do
        asyncio.run(agents(url, args.agents, 1, args.max_tokens, engine_keys))  # warm the batch shapes
        rolling(store, url, ENGINE_KEY, args.model)
        proxy, purl = start_proxy(db, work)
        time.sleep(0.5)  # the proxy reads the experiment's row every 0.2 s
        keys = [_begin(purl) for _ in range(args.agents)]
        direct, proxied = [], []
        for _ in range(args.repeats):
            direct.append(_rate(url, engine_keys, args))
            proxied.append(_rate(purl + "/v1", keys, args))
        logged = sum(len(store.calls(e.uuid)) for e in store.episodes())
        emit(figure="direct", agents=args.agents, calls=args.calls, tokens_per_s=spread(direct),
             max_batch_seen=engine.batcher.stats["max_batch_seen"])  # fmt: skip
        emit(figure="through_proxy", agents=args.agents, calls=args.calls, tokens_per_s=spread(proxied),
             calls_logged=logged)  # fmt: skip
        shares = [(d - p) / d for d, p in zip(direct, proxied)]
        value = (statistics.median(direct) - statistics.median(proxied)) / statistics.median(direct)
        emit(figure="proxy_share", value=round(value, 4), per_repeat=spread(shares), repeats=args.repeats, goal=0.02)
        if args.device.startswith("cuda"):
            emit(figure="max_memory_gb", value=round(torch.cuda.max_memory_allocated() / 2**30, 2))
        assert logged == args.agents * args.calls * args.repeats, f"{logged} calls logged"
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(30)
        store.close()


def _rate(url: str, keys: list[str], args: argparse.Namespace) -> float:
    tokens, secs = asyncio.run(agents(url, args.agents, args.calls, args.max_tokens, keys))
    return tokens / secs


async def _warm(url: str) -> None:
    async with httpx.AsyncClient(timeout=600) as http:
        body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        await http.post(f"{url}/chat/completions", json=body, headers={"Authorization": f"Bearer {ENGINE_KEY}"})


def _begin(purl: str) -> str:
    r = httpx.post(f"{purl}/swarm/begin_episode", json={"discard_episode_timeout": 3600}, timeout=60)
    r.raise_for_status()
    return str(r.json()["api_key"])


if __name__ == "__main__":
    main()
