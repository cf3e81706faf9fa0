"""vLLM CPU workers start by fork unless asked otherwise. The OpenMP pinning of a forked
worker is checked in a fresh interpreter in tests/integration/test_cpu_fork_pinning.py."""


def test_fork_is_the_cpu_default_and_spawn_is_kept_on_request():
    from inference.config import InferenceConfig

    assert InferenceConfig().cpu.start_method == "fork"
    spawn = InferenceConfig.model_validate({"cpu": {"start_method": "spawn"}})
    assert spawn.cpu.start_method == "spawn"
