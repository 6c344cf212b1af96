"""Dataset readers on real files in the Hugging Face layout, JSONL and Arrow."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ajet import AjetTaskReader, ConfigError, HuggingfaceDatRepo, JsonlDatasetFile, JsonlTrainingFp, RouterTaskReader
from ajet.default_config.ajet_config_schema import JsonlValidationFp, RandomDummy

ROWS = [{"question": f"What is {i} + {i}?", "answer": f"Double it.\n#### {2 * i}"} for i in range(5)]


@pytest.fixture
def gsm8k_like(tmp_path):
    root = tmp_path / "gsm8k"
    (root / "main").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(ROWS), root / "main" / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(ROWS[:2]), root / "main" / "test-00000-of-00001.parquet")
    return root


def _hf(path, **kw):
    return RouterTaskReader(
        "huggingface_dat_repo", AjetTaskReader(huggingface_dat_repo=HuggingfaceDatRepo(dataset_path=str(path), **kw))
    )


def test_hf_layout_finds_config_folder_and_splits(gsm8k_like):
    reader = _hf(gsm8k_like)
    train = reader.generate_training_tasks()
    assert [t.main_query for t in train] == [r["question"] for r in ROWS]
    assert train[0].metadata["answer"] == ROWS[0]["answer"]
    assert len(reader.generate_validation_tasks()) == 2
    assert [t.task_id for t in _hf(gsm8k_like, dataset_name="main").generate_training_tasks()] == [
        t.task_id for t in train
    ]


def test_task_ids_stable_and_distinct(gsm8k_like):
    a = [t.task_id for t in _hf(gsm8k_like).generate_training_tasks()]
    b = [t.task_id for t in _hf(gsm8k_like).generate_training_tasks()]
    assert a == b and len(set(a)) == len(a)


def test_arrow_and_jsonl_split_files(tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    table = pa.Table.from_pylist(ROWS)
    with pa.OSFile(str(root / "train.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    (root / "test.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS[:3]))
    reader = _hf(root)
    assert len(reader.generate_training_tasks()) == 5
    assert len(reader.generate_validation_tasks()) == 3


def test_missing_path_split_and_config_named(gsm8k_like, tmp_path):
    with pytest.raises(ConfigError, match="nowhere"):
        _hf(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="split 'dev'"):
        _hf(gsm8k_like, validation_split="dev").generate_validation_tasks()
    with pytest.raises(ConfigError, match="socratic"):
        _hf(gsm8k_like, dataset_name="socratic").generate_training_tasks()


def test_jsonl_reader(tmp_path):
    f = tmp_path / "train.jsonl"
    f.write_text("\n".join(json.dumps({"task_id": f"t{i}", "prompt": f"p{i}"}) for i in range(3)) + "\n")
    cfg = AjetTaskReader(jsonl_dataset_file=JsonlDatasetFile(training=JsonlTrainingFp(file_path=str(f))))
    reader = RouterTaskReader("jsonl_dataset_file", cfg)
    tasks = reader.generate_training_tasks()
    assert [(t.task_id, t.main_query) for t in tasks] == [("t0", "p0"), ("t1", "p1"), ("t2", "p2")]
    with pytest.raises(ConfigError, match="no validation file"):
        reader.generate_validation_tasks()
    missing = AjetTaskReader(
        jsonl_dataset_file=JsonlDatasetFile(
            training=JsonlTrainingFp(file_path=str(f)),
            validation=JsonlValidationFp(file_path=str(tmp_path / "v.jsonl")),
        )
    )
    with pytest.raises(ConfigError, match="v.jsonl"):
        RouterTaskReader("jsonl_dataset_file", missing).generate_validation_tasks()
    f.write_text("{not json\n")
    with pytest.raises(ConfigError, match="train.jsonl:1"):
        reader.generate_training_tasks()


def test_random_dummy_and_unknown_type():
    r = RouterTaskReader("random_dummy", AjetTaskReader(random_dummy=RandomDummy(num_tasks=4)))
    assert [t.task_id for t in r.generate_training_tasks()] == ["dummy-0", "dummy-1", "dummy-2", "dummy-3"]
    assert r.generate_training_tasks() == r.generate_training_tasks()
    with pytest.raises(ConfigError, match="unknown reader_type"):
        RouterTaskReader("s3_bucket", AjetTaskReader())
    with pytest.raises(ConfigError, match="huggingface_dat_repo is required"):
        RouterTaskReader("huggingface_dat_repo", AjetTaskReader())
