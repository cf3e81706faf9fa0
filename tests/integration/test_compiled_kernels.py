"""The trainer's compiled paths on CPU: torch.compile per decoder layer gives the plain model's
gradients, and flex attention (a compiled kernel) honours Gemma-2's softcap and sliding window
on packed rows. Inductor starts a compiler's processes, so these live here, not in tests/unit;
about a minute each (slow tier)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "trainer"))

from test_families import (  # noqa: E402
    test_gemma2_packed_rows_with_the_kernels_that_softcap as softcap_check,
)
from test_model_options import gradients_after_one_step  # noqa: E402

from trainer.model import decoder_layers  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_compiled_layers_give_the_same_gradients(tiny_model_dir, tmp_path, fake_config, cpu_world):
    _, plain = gradients_after_one_step(tiny_model_dir, tmp_path / "a", fake_config, cpu_world)
    model, compiled = gradients_after_one_step(
        tiny_model_dir, tmp_path / "b", fake_config, cpu_world, compile=True
    )
    assert all(layer._compiled_call_impl is not None for layer in decoder_layers(model))
    for name, grad in plain.items():
        torch.testing.assert_close(compiled[name], grad, rtol=1e-4, atol=1e-5, msg=name)


def test_gemma2_packed_rows_with_flex_attention(family_dirs, cpu_world):
    softcap_check(family_dirs, cpu_world, kernel="flex_attention")
