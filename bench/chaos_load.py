"""The chaos soak's clients: three experiments (the letters jobs of tests/support/letters_clients.py, LoRA on one
base), each played by a few threads, recording exactly what they were told: each call answered (its episode and
latency) and each end acknowledged (its reward). What failed is counted, and the episode played again."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import openai

from ajet import AjetError, SwarmClient, Task, WorkflowOutput
from tests.support.letters_clients import LETTERS, letters_job

PROMPT = [{"role": "user", "content": "Say a letter"}]


@dataclass
class Played:
    """What one experiment's clients were told."""

    name: str
    acked_calls: dict[str, int] = field(default_factory=dict)
    """Episode -> its calls answered to the client."""
    acked_ends: dict[str, float] = field(default_factory=dict)
    """Episode -> the reward of its acknowledged end."""
    latencies: list[tuple[str, float, float]] = field(default_factory=list)
    """(experiment, start, seconds) of each answered call."""
    failed: dict[str, int] = field(default_factory=dict)
    """What failed, by kind (`begin`, `call`, `end`): the episode was played again."""
    why: dict[str, int] = field(default_factory=dict)
    """What failed, by kind and the error's class and status (`call 503 InternalServerError`)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, kind: str, error: BaseException) -> None:
        status = getattr(error, "status_code", None) or getattr(error, "status", None) or ""
        reason = f"{kind} {status} {type(error).__name__}: {str(error)[:160]}".replace("  ", " ")
        with self.lock:
            self.failed[kind] = self.failed.get(kind, 0) + 1
            self.why[reason] = self.why.get(reason, 0) + 1


class Load:
    """The experiments' clients (`names`: every letters job by default): `threads` each, more for a flooded one
    while a flood lasts."""

    def __init__(self, url: str, threads: int, names: tuple[str, ...] = tuple(LETTERS), pace: float = 0.0):
        self.url, self.threads = url, threads
        self.pace = pace
        """Seconds each thread waits after an episode (0: the next begins at once, as fast as the swarm answers)."""
        self.played = {name: Played(name) for name in names}
        self.stop = threading.Event()
        self.flood_until = 0.0
        self.flood_windows: list[tuple[float, float]] = []
        self.clients = {name: self._client(name) for name in names}
        self._workers: list[threading.Thread] = []

    def _client(self, name: str) -> SwarmClient:
        client = SwarmClient(self.url, verbose=False, begin_episode_max_wait=30.0, store_max_wait=30.0)
        client.auto_sync_train_config_and_start_engine(letters_job(name))
        return client

    def start(self) -> None:
        for name in self.played:
            for i in range(self.threads):
                self._spawn(name, f"{name}-{i}", lambda: self.stop.is_set())

    def _spawn(self, name: str, label: str, done: Callable[[], bool]) -> None:
        t = threading.Thread(target=self._play, args=(name, done), name=label, daemon=True)
        t.start()
        self._workers.append(t)

    def flood(self, seconds: float, name: str = "ea", extra: int = 8) -> None:
        """`extra` more threads on experiment `name` for `seconds` (the others' latency meanwhile is the measure)."""
        start = time.time()
        until = start + seconds
        for i in range(extra):
            self._spawn(name, f"flood-{i}", lambda: self.stop.is_set() or time.time() > until)
        time.sleep(seconds)
        self.flood_windows.append((start, until))

    def _play(self, name: str, done: Callable[[], bool]) -> None:
        client, played, letter = self.clients[name], self.played[name], LETTERS[name]
        while not done():
            try:
                uuid, creds = client.begin_episode()
            except AjetError as exc:
                played.count("begin", exc)
                time.sleep(1.0)
                continue
            t0 = time.time()
            try:  # the SDK's client of the episode, on the process's one pool (ajet.episode_pool), closed after
                with creds.as_openai_client(max_retries=0, timeout=120) as oc:
                    answer = oc.chat.completions.create(model=creds.model, messages=PROMPT, max_tokens=1)
            except openai.APIError as exc:
                played.count("call", exc)
                continue
            with played.lock:
                played.acked_calls[uuid] = played.acked_calls.get(uuid, 0) + 1
                played.latencies.append((name, t0, time.time() - t0))
            reward = float((answer.choices[0].message.content or "")[:1] == letter)
            try:
                client.end_episode(Task(task_id="say"), uuid, WorkflowOutput(reward=reward))
            except AjetError as exc:
                played.count("end", exc)
                continue
            with played.lock:
                played.acked_ends[uuid] = reward
            if self.pace:
                self.stop.wait(self.pace)

    def drain(self) -> int:
        """The calls answered since the last drain, their records dropped (a soak of hours counts, it audits
        nothing: the records would be the client's growth)."""
        n = 0
        for p in self.played.values():
            with p.lock:
                n += sum(p.acked_calls.values())
                p.acked_calls.clear()
                p.acked_ends.clear()
                p.latencies.clear()
        return n

    def finish(self) -> None:
        """Stop every client, and send again the rewards the swarm could not take."""
        self.stop.set()
        for t in self._workers:
            t.join(180)
        for client in self.clients.values():
            client.resend_kept_rewards()
