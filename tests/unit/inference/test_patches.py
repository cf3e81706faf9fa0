"""The version check of inference's run-time patches (inference/patches.py): the installed vLLM
and torch are the ones the patches were written for, and any other stops the start with one
message naming the patch, the version found and the fix."""

import pytest

from inference import patches
from inference.patches import TORCH_SUPPORTED, VLLM_SUPPORTED, require_version
from rlcore.errors import ConfigError


def test_the_installed_vllm_and_torch_are_the_ones_the_patches_were_written_for():
    require_version("vllm", VLLM_SUPPORTED, "a patch")
    require_version("torch", TORCH_SUPPORTED, "a patch")


def test_vllms_cpu_build_counts_as_vllm():
    assert patches.installed_version("vllm") is not None


@pytest.mark.parametrize(
    ("found", "supported", "accepted"),
    [
        ("0.32.0", "==0.32.*", True),
        ("0.32.1.dev4+g1234abc.cpu", "==0.32.*", True),
        ("2.13.0+cpu", "==2.13.*", True),
        ("0.33.0", "==0.32.*", False),
        ("0.31.9", "==0.32.*", False),
        ("not-a-version", "==0.32.*", False),
        (None, "==0.32.*", False),
    ],
)
def test_another_version_stops_the_start_naming_the_patch(found, supported, accepted, monkeypatch):
    monkeypatch.setattr(patches, "installed_version", lambda package: found)
    if accepted:
        require_version("vllm", supported, "the patch")
        return
    with pytest.raises(ConfigError) as refused:
        require_version("vllm", supported, "the patch (inference/x.py)")
    message = str(refused.value)
    assert message.startswith(f"the patch (inference/x.py) was written for vllm{supported}")
    assert (found or "(not installed)") in message and "uv sync --extra cpu" in message
