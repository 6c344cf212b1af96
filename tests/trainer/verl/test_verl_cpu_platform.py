"""verl's CPU platform, the engine/topology choice, and the weight hand-over from verl's actor (no Ray here)."""

import pytest
import torch

from ajet import AgentJetJob
from ajet_trainer.errors import TrainerError
from ajet_trainer.factory import resolve_engine
from ajet_trainer.policy import load_policy
from ajet_trainer.tiny_model import builtin_model_path


def test_engine_auto_is_hybrid_only_for_verl_on_cuda_and_hybrid_needs_verl():
    assert resolve_engine("verl", "auto", cuda=True) == "hybrid"
    assert resolve_engine("verl", "auto", cuda=False) == "embedded"  # verl's actor beside the embedded engine
    assert resolve_engine("embedded", "auto", cuda=True) == "embedded"
    assert resolve_engine("verl", "vllm", cuda=True) == "vllm"
    with pytest.raises(TrainerError, match="--engine hybrid .* needs --backend verl"):
        resolve_engine("embedded", "hybrid", cuda=True)


def test_the_cpu_platform_is_registered_in_verl_and_never_auto_detected():
    from verl.plugin.platform import PlatformRegistry

    from ajet_trainer.verl.cpu_platform import ENV, PlatformCPU

    assert PlatformRegistry.get("cpu") is PlatformCPU
    p = PlatformCPU()
    assert (p.device_name, p.communication_backend_name(), p.ray_resource_name()) == ("cpu", "gloo", "CPU")
    assert p.ray_resource_options(1) == {"num_cpus": 1}
    assert not p.is_platform_available(use_smi_check=True)  # only VERL_PLATFORM=cpu selects it
    assert torch.zeros(1).to(p.current_device()).device.type == "cpu"  # an int would mean "accelerator 0"
    dev = p.device_module
    assert dev.memory_allocated() == 0 and dev.is_available()
    free, total = dev.mem_get_info()
    assert 0 < free <= total
    state = dev.get_rng_state()
    a = torch.rand(3)
    dev.set_rng_state(state)
    assert torch.equal(a, torch.rand(3))
    assert ENV == {"VERL_PLATFORM": "cpu", "VERL_USE_EXTERNAL_MODULES": "ajet_trainer.verl.cpu_platform"}


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_weights_from_verls_actor_land_in_the_served_model_or_fail_loudly(lora_rank):
    from ajet_trainer.verl.beside import load_weights

    job = AgentJetJob(model="builtin:tiny", lora_rank=lora_rank)
    model, _ = load_policy(str(builtin_model_path("builtin:tiny")), job, "cpu")
    if lora_rank:  # verl exports peft names without the adapter name
        names = [k.replace(".default.weight", ".weight") for k in model.state_dict() if "lora_" in k]
    else:
        names = list(model.state_dict())
    weights = {
        n: torch.full_like(
            model.state_dict()[n.replace(".weight", ".default.weight") if lora_rank and "lora_" in n else n], 0.5
        )
        for n in names
    }
    load_weights(model, weights)
    trained = [v for k, v in model.state_dict().items() if (not lora_rank or "lora_" in k)]
    assert trained and all(torch.all(v == 0.5) for v in trained)
    with pytest.raises(ValueError, match="lacks"):
        load_weights(model, {**weights, "model.no_such_layer.weight": torch.zeros(1)})
    if not lora_rank:
        with pytest.raises(ValueError, match="no value"):
            load_weights(model, {k: v for k, v in weights.items() if k != names[1]})
