"""Reader configuration models, at the original AgentJet import path."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HuggingfaceDatRepo(_Cfg):
    """A local dataset folder in the Hugging Face layout (e.g. gsm8k with `main/train-*.parquet`)."""

    dataset_path: str
    """The dataset folder (or one split file)."""
    dataset_name: Optional[str] = None
    """The config subfolder (gsm8k: `main`); found automatically when there is only one."""
    training_split: str = "train"
    """Split name of the training tasks."""
    validation_split: str = "test"
    """Split name of the validation tasks."""


class JsonlTrainingFp(_Cfg):
    """The training file of a JSONL dataset."""

    file_path: str
    """Path of a `.jsonl` file, one task per line."""


class JsonlValidationFp(_Cfg):
    """The validation file of a JSONL dataset."""

    file_path: str
    """Path of a `.jsonl` file, one task per line."""


class JsonlDatasetFile(_Cfg):
    """A dataset as JSONL files."""

    training: JsonlTrainingFp
    """The training file."""
    validation: Optional[JsonlValidationFp] = None
    """The validation file (optional)."""


class RandomDummy(_Cfg):
    """Generated tasks for plumbing tests."""

    num_tasks: int = Field(default=64, ge=1)
    """How many tasks."""
    seed: int = 0
    """Seed of the generated queries."""


class AjetTaskReader(_Cfg):
    """Which reader to use and its settings; `RouterTaskReader` picks the block named by its type."""

    huggingface_dat_repo: Optional[HuggingfaceDatRepo] = None
    """Settings of `huggingface_dat_repo`."""
    jsonl_dataset_file: Optional[JsonlDatasetFile] = None
    """Settings of `jsonl_dataset_file`."""
    random_dummy: RandomDummy = RandomDummy()
    """Settings of `random_dummy`."""


__all__ = [
    "AjetTaskReader",
    "HuggingfaceDatRepo",
    "JsonlDatasetFile",
    "JsonlTrainingFp",
    "JsonlValidationFp",
    "RandomDummy",
]
"""The task readers' configs, which `ajet.default_config.ajet_default` re-exports at the seed's path."""
