"""The default job configuration, at the original AgentJet import path."""

from __future__ import annotations

from typing import Any

import yaml

from ajet.default_config import ajet_config_schema
from ajet.default_config.ajet_config_schema import *  # noqa: F403 - the seed imports the readers' configs from here
from ajet.job import AgentJetJob


def default_job() -> dict[str, Any]:
    """Every job field with its default value."""
    return AgentJetJob().to_wire()


def default_job_yaml() -> str:
    """The defaults as YAML, in the layout `AgentJetJob.dump_job_as_yaml` writes."""
    wire = default_job()
    return yaml.safe_dump(
        {"ajet": {k: v for k, v in wire.items() if k != "verl"}, "verl": wire["verl"]}, sort_keys=False
    )


__all__ = ["default_job", "default_job_yaml", *ajet_config_schema.__all__]
