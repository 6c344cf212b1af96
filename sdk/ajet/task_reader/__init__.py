"""Dataset readers: turn local dataset files into `Task`s with ids stable across runs.

`RouterTaskReader(reader_type, reader_config)` picks one of:
- `huggingface_dat_repo`: a local folder in the Hugging Face layout (parquet, jsonl, json or arrow split
  files such as gsm8k's `main/train-00000-of-00001.parquet`);
- `jsonl_dataset_file`: JSONL files;
- `random_dummy`: generated tasks for plumbing tests.
A missing path or split is a `ConfigError` naming it.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any, Iterator, Optional

from ajet.default_config.ajet_config_schema import AjetTaskReader, HuggingfaceDatRepo, JsonlDatasetFile, RandomDummy
from ajet.errors import ConfigError
from ajet.types import Task

__all__ = ["RouterTaskReader", "HuggingFaceTaskReader", "JsonlTaskReader", "RandomDummyTaskReader", "row_to_task"]

_QUERY_KEYS = ("main_query", "question", "prompt", "query", "problem", "instruction", "input")
_ID_KEYS = ("task_id", "id", "uid")
_SPLIT_SUFFIXES = (".parquet", ".jsonl", ".json", ".arrow")


def row_to_task(row: dict[str, Any], split: str) -> Task:
    """A dataset row as a `Task`; without an id column the id is a hash of the row's content."""
    task_id = next((str(row[k]) for k in _ID_KEYS if row.get(k) not in (None, "")), None)
    if task_id is None:
        digest = hashlib.sha1(json.dumps(row, sort_keys=True, default=str).encode()).hexdigest()[:16]
        task_id = f"{split}-{digest}"
    query = next((str(row[k]) for k in _QUERY_KEYS if isinstance(row.get(k), str)), "")
    init_messages = row.get("init_messages") if isinstance(row.get("init_messages"), list) else []
    return Task(
        task_id=task_id,
        main_query=query,
        init_messages=init_messages,
        env_type=str(row.get("env_type", "") or ""),
        metadata=dict(row),
    )


def _read_rows(path: Path) -> Iterator[dict[str, Any]]:
    suffix = path.suffix
    if suffix == ".jsonl":
        with path.open() as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise ConfigError(f"{path}:{n}: not valid JSON ({exc})") from exc
    elif suffix == ".json":
        data = json.loads(path.read_text())
        yield from (data if isinstance(data, list) else data.get("data", []))
    elif suffix in (".parquet", ".arrow"):
        yield from _read_arrow_table(path).to_pylist()
    else:
        raise ConfigError(f"unsupported dataset file type: {path}")


def _read_arrow_table(path: Path) -> Any:
    try:
        import pyarrow.ipc as ipc
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - pyarrow is in the client extra
        raise ConfigError(f"reading {path} needs pyarrow: pip install 'agentjet-swarm[client]'") from exc
    if path.suffix == ".parquet":
        return pq.read_table(path)
    with path.open("rb") as fh:
        try:
            return ipc.open_stream(fh).read_all()
        except Exception:  # an Arrow IPC *file* instead of a stream (both occur in HF folders)
            fh.seek(0)
            return ipc.open_file(fh).read_all()


class HuggingFaceTaskReader:
    """Reads a local Hugging Face dataset folder."""

    def __init__(self, config: HuggingfaceDatRepo):
        self.config = config
        self.root = Path(config.dataset_path).expanduser()
        if not self.root.exists():
            raise ConfigError(f"dataset path not found: {self.root}")

    def _config_dir(self) -> Path:
        if self.root.is_file():
            return self.root.parent
        if self.config.dataset_name:
            sub = self.root / self.config.dataset_name
            if not sub.is_dir():
                raise ConfigError(f"dataset config '{self.config.dataset_name}' not found under {self.root}")
            return sub
        if any(self._split_files(self.root, s) for s in (self.config.training_split, self.config.validation_split)):
            return self.root
        subs = [d for d in sorted(self.root.iterdir()) if d.is_dir() and not d.name.startswith(".")]
        for d in [self.root / "data", *subs]:
            if d.is_dir() and self._split_files(d, self.config.training_split):
                return d
        return self.root

    @staticmethod
    def _split_files(folder: Path, split: str) -> list[Path]:
        files = [p for p in sorted(folder.iterdir()) if p.is_file() and p.suffix in _SPLIT_SUFFIXES]
        return [p for p in files if p.stem == split or p.name.startswith(f"{split}-") or p.name.startswith(f"{split}.")]

    def _tasks(self, split: str) -> list[Task]:
        if self.root.is_file():
            files = [self.root]
        else:
            folder = self._config_dir()
            files = self._split_files(folder, split)
            if not files:
                raise ConfigError(f"split '{split}' not found in {folder}")
        return [row_to_task(row, split) for f in files for row in _read_rows(f)]

    def generate_training_tasks(self) -> list[Task]:
        """All tasks of the training split, in file order."""
        return self._tasks(self.config.training_split)

    def generate_validation_tasks(self) -> list[Task]:
        """All tasks of the validation split, in file order."""
        return self._tasks(self.config.validation_split)


class JsonlTaskReader:
    """Reads JSONL files, one task per line."""

    def __init__(self, config: JsonlDatasetFile):
        self.config = config

    @staticmethod
    def _read(path_str: str, split: str) -> list[Task]:
        path = Path(path_str).expanduser()
        if not path.is_file():
            raise ConfigError(f"dataset file not found: {path}")
        return [row_to_task(row, split) for row in _read_rows(path)]

    def generate_training_tasks(self) -> list[Task]:
        """All tasks of the training file."""
        return self._read(self.config.training.file_path, "train")

    def generate_validation_tasks(self) -> list[Task]:
        """All tasks of the validation file (an error if none was configured)."""
        if self.config.validation is None:
            raise ConfigError("jsonl_dataset_file has no validation file configured")
        return self._read(self.config.validation.file_path, "validation")


class RandomDummyTaskReader:
    """Deterministic generated tasks (`dummy-0`, `dummy-1`, ...)."""

    def __init__(self, config: RandomDummy):
        self.config = config

    def _make(self, prefix: str, n: int, seed: int) -> list[Task]:
        rng = random.Random(seed)
        return [
            Task(task_id=f"{prefix}-{i}", main_query=f"Say the number {rng.randint(0, 99)}.", metadata={"index": i})
            for i in range(n)
        ]

    def generate_training_tasks(self) -> list[Task]:
        """`num_tasks` training tasks."""
        return self._make("dummy", self.config.num_tasks, self.config.seed)

    def generate_validation_tasks(self) -> list[Task]:
        """A quarter as many validation tasks (at least one)."""
        return self._make("dummy-val", max(1, self.config.num_tasks // 4), self.config.seed + 1)


_READERS = {
    "huggingface_dat_repo": ("huggingface_dat_repo", HuggingFaceTaskReader),
    "jsonl_dataset_file": ("jsonl_dataset_file", JsonlTaskReader),
    "random_dummy": ("random_dummy", RandomDummyTaskReader),
}


class RouterTaskReader:
    """Picks a reader by `reader_type` and forwards to it."""

    def __init__(self, reader_type: str, reader_config: Optional[AjetTaskReader] = None):
        if reader_type not in _READERS:
            raise ConfigError(f"unknown reader_type '{reader_type}'; one of {sorted(_READERS)}")
        reader_config = reader_config or AjetTaskReader()
        attr, cls = _READERS[reader_type]
        sub = getattr(reader_config, attr)
        if sub is None:
            raise ConfigError(f"reader_config.{attr} is required for reader_type '{reader_type}'")
        self.reader_type = reader_type
        self.reader = cls(sub)

    def generate_training_tasks(self) -> list[Task]:
        """The training tasks."""
        return self.reader.generate_training_tasks()

    def generate_validation_tasks(self) -> list[Task]:
        """The validation tasks."""
        return self.reader.generate_validation_tasks()

    def __iter__(self) -> Iterator[Task]:
        return iter(self.generate_training_tasks())
