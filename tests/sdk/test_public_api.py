"""Every public name resolves, and the original AgentJet import paths work."""

import importlib

import pytest

import ajet
import ajet_proxy
import ajet_store
import ajet_swarm
import ajet_trainer
import ajet_trainer.verl


@pytest.mark.parametrize("module", [ajet, ajet_proxy, ajet_store, ajet_swarm, ajet_trainer, ajet_trainer.verl])
def test_all_names_resolve(module):
    assert module.__all__, "empty __all__"
    for name in module.__all__:
        assert getattr(module, name) is not None, name


@pytest.mark.parametrize(
    "path,names",
    [
        ("ajet.copilot.job", ["AgentJetJob"]),
        ("ajet.tuner_lib.experimental.swarm_client", ["SwarmClient", "run_episodes_until_all_complete"]),
        (
            "ajet.tuner_lib.experimental.as_swarm_client",
            ["SwarmClient", "OpenaiBaseUrlAndApiKey", "run_episodes_until_all_complete", "auto_train_with_dataset"],
        ),
        ("ajet.tuner_lib.as_oai_baseurl_apikey", ["OpenaiBaseUrlAndApiKey"]),
        ("ajet.schema.task", ["Task", "WorkflowOutput"]),
        ("ajet.task_reader", ["RouterTaskReader", "HuggingFaceTaskReader"]),
        (
            "ajet.default_config.ajet_config_schema",
            ["AjetTaskReader", "HuggingfaceDatRepo", "JsonlDatasetFile", "JsonlTrainingFp"],
        ),
        (
            "ajet.default_config.ajet_default",
            [
                "default_job",
                "default_job_yaml",
                "AjetTaskReader",
                "HuggingfaceDatRepo",
                "JsonlDatasetFile",
                "JsonlTrainingFp",
            ],
        ),
        (
            "ajet.utils.thread_executors",
            ["PeriodicDrainThreadPoolExecutor", "BoundedThreadPoolExecutor", "run_episodes_until_all_complete"],
        ),
    ],
)
def test_seed_import_paths(path, names):
    mod = importlib.import_module(path)
    for name in names:
        assert hasattr(mod, name), f"{path}.{name}"
    # the seed paths re-export the same objects, not copies
    if hasattr(mod, "SwarmClient"):
        assert mod.SwarmClient is ajet.SwarmClient


def test_sdk_does_not_import_proxy_or_trainer():
    import subprocess
    import sys

    code = (
        "import sys, ajet, ajet.task_reader, ajet.utils.thread_executors; "
        "bad=[m for m in sys.modules if m.split('.')[0] in ('ajet_proxy','ajet_trainer','litellm','torch','fastapi')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
