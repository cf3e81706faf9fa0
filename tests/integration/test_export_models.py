"""`rl export`: a LoRA run's adapter merged into the base, or a full run's weights, as an HF
folder that computes what the trained policy computes (the export runs in its own process)."""

import shutil

import pytest
import torch

from launcher.commands import run_command
from tests.unit.launcher.test_export import logits, lora_logits, train

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_lora_export_merges_the_adapter(tiny_model_dir, tmp_path, capsys, fake_config):
    rd = train(fake_config, tiny_model_dir, tmp_path / "run", lora=True)
    out = tmp_path / "merged"
    assert run_command("export", [str(rd.root), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "step 2 (LoRA adapter merged into the base, from its checkpoint)" in said
    expected = lora_logits(tiny_model_dir, rd.weight_dir(2))
    torch.testing.assert_close(logits(out), expected, rtol=1e-4, atol=1e-4)
    assert (logits(out) - logits(tiny_model_dir)).abs().max() > 1e-3  # it trained
    assert not any("lora" in p.name for p in out.iterdir())
    # Without the checkpoint, the published adapter gives the same policy.
    shutil.rmtree(rd.checkpoint_dir(2))
    out2 = tmp_path / "merged2"
    assert (
        run_command(
            "export", [str(rd.root), "--step", "2", "--out", str(out2), "--dtype", "bfloat16"]
        )
        == 0
    )
    assert "from its weights" in capsys.readouterr().out
    torch.testing.assert_close(logits(out2), expected, rtol=0.05, atol=0.05)


def test_full_run_export_is_the_trained_model(tiny_model_dir, tmp_path, fake_config):
    from safetensors.torch import load_file

    rd = train(fake_config, tiny_model_dir, tmp_path / "run", lora=False)
    out = tmp_path / "model"
    assert run_command("export", [str(rd.root), "--step", "1", "--out", str(out)]) == 0
    exported = load_file(str(out / "model.safetensors"))
    published = load_file(str(rd.weight_dir(1) / "model.safetensors"))
    assert exported.keys() == published.keys()
    for name, tensor in published.items():
        torch.testing.assert_close(exported[name], tensor)
