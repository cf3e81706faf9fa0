"""vLLM CPU workers start by fork unless asked otherwise. The OpenMP pinning of a forked
worker is checked in a fresh interpreter in tests/integration/test_cpu_fork_pinning.py."""


def test_fork_is_the_cpu_default_and_spawn_is_kept_on_request():
    from inference.config import InferenceConfig

    assert InferenceConfig().cpu.start_method == "fork"
    spawn = InferenceConfig.model_validate({"cpu": {"start_method": "spawn"}})
    assert spawn.cpu.start_method == "spawn"


def test_the_worker_runs_inside_the_engine_core_unless_asked_otherwise():
    from inference.config import InferenceConfig

    assert InferenceConfig().cpu.separate_worker is False
    apart = InferenceConfig.model_validate({"cpu": {"separate_worker": True}})
    assert apart.cpu.separate_worker is True
