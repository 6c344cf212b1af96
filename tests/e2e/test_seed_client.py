"""The original "Demo 1" client runs against ajet-proxy with only its constants changed."""

import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ajet.types import EpisodeStatus, ExperimentState
from ajet_store import Store, sqlite_url
from tests.e2e.seed_script import run_script, with_constants
from tests.support.procs import REPO, Trainer, start_proxy
from tests.support.rolling import make_rolling

ROWS = [{"question": f"What is {i} plus {i}?", "answer": f"#### {2 * i}"} for i in range(6)]


def demo1(tmp_path, swarm_url: str, data, **constants) -> Path:
    """The Demo-1 client with its swarm, its dataset and one epoch of 2 rollouts a task, plus `constants`."""
    return with_constants(
        REPO / "tests/e2e/seed/demo1_client.py",
        tmp_path / "demo1.py",
        REMOTE_SWARM_URL=swarm_url,
        LOCAL_DATASET_PATH=str(data.parent),
        LOCAL_NUM_EPOCH=1,
        LOCAL_GRPO_N=2,
        REMOTE_TRAIN_MODEL="builtin:tiny",
        **constants,
    )


def test_demo1_client_runs_unchanged(tmp_path, stub):
    data = tmp_path / "gsm8k" / "main"
    data.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(ROWS), data / "train-00000-of-00001.parquet")
    url = sqlite_url(tmp_path / "seed.db")
    px = start_proxy(tmp_path, url)
    st = Store(url)
    stop = threading.Event()

    def act_as_trainer():  # until the trainer exists here, the test moves BOOTING -> ROLLING itself
        while not stop.is_set():
            if st.experiment().state == ExperimentState.BOOTING:
                make_rolling(st, stub.url)
            time.sleep(0.1)

    th = threading.Thread(target=act_as_trainer, daemon=True)
    th.start()
    try:
        script = demo1(tmp_path, px.url, data, REMOTE_BATCH_SIZE=3)
        res = run_script(script, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "rollout failed" not in res.stdout, res.stdout
        eps = st.episodes(status=EpisodeStatus.ENDED)
        assert len(eps) == len(ROWS) * 2
        assert len({e.task_id for e in eps}) == len(ROWS)
        assert all(e.num_calls == 1 and st.calls(e.uuid)[0].completion_ids for e in eps)
        assert st.experiment().state == ExperimentState.OFFLINE  # the script stops the engine at its end
        assert st.experiment().job.batch_size == 3
    finally:
        stop.set()
        th.join(5)
        px.close()
        st.close()


@pytest.mark.slow
def test_demo1_job_with_its_gpu_count_trains_on_verl_on_a_cpu_box(tmp_path):
    """Round two: the seed's job (n_gpu 8, the default) on `--backend verl` without a GPU failed to boot ("needs 8
    CPU(s) in the Ray cluster"), and its client waited 12 minutes. On the CPU platform n_gpu maps to the ranks the
    node's CPUs hold, with one log line, and the job trains through verl's real actor."""
    data = tmp_path / "gsm8k" / "main"
    data.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(ROWS[:4]), data / "train-00000-of-00001.parquet")
    url = sqlite_url(tmp_path / "seed-verl.db")
    px = start_proxy(tmp_path, url)
    trainer = Trainer(tmp_path, url, tmp_path / "exp", backend="verl")
    st = Store(url)
    try:
        script = demo1(tmp_path, px.url, data, REMOTE_BATCH_SIZE=2, REMOTE_ALLOCATE_GPU_PER_NODE=8,
                       STOP_ENGINE_AT_END=False)  # fmt: skip
        res = run_script(script, timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr + trainer.log_tail()
        deadline = time.monotonic() + 300
        while len(st.steps()) < 2:  # 4 tasks x 2 in batches of 2 tasks: two steps
            assert time.monotonic() < deadline and trainer.proc.poll() is None, trainer.log_tail()
            time.sleep(0.5)
        cpus = len(os.sched_getaffinity(0))
        log = trainer.log_path.read_text(errors="replace")
        assert f"asks for n_gpu=8; on the CPU platform that is one gloo rank per CPU, and this node has {cpus}" in log
        assert "/1000000" not in log and "step 2: reward" in log  # no progress bar toward a made-up end
        assert st.experiment().job.n_gpu == 8  # the store keeps the job as sent; the trainer fits it to the box
        assert st.experiment().last_error is None
        assert all(s.metrics.get("loss") is not None for s in st.steps())  # verl's actor took each step
        # leftovers (episodes that straddled step 1) train corrected by verl's rollout correction, never dropped: a
        # dropped one would strand its group's sibling, and the second step would never come
        assert all("verl/rollout_corr/rollout_is_mean" in s.metrics for s in st.steps())
        assert not [e.untrainable_reason for e in st.episodes() if e.untrainable]
    finally:
        trainer.close()
        px.close()
        st.close()
