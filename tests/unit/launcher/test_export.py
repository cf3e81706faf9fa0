"""`rl export`: a LoRA run's adapter merged into the base, or a full run's weights, as an HF
folder that computes what the trained policy computes; user errors exit 2."""

import shutil

import torch

from launcher.commands import run_command
from rlcore.rundir import RunDir
from trainer.config import TrainerConfig
from trainer.train import run

IDS = torch.tensor([[1, 5, 9, 42, 7, 3, 11]])


def train(model_dir, out, lora: bool) -> RunDir:
    data = {
        "model": {"name": str(model_dir), "dtype": "float32"},
        "output_dir": str(out),
        "max_steps": 2,
        "seq_len": 32,
        "data": {"fake": {"batch_size": 2}},
        "optim": {"lr": 1e-2},
        "ckpt": {"interval": 1},
    }
    if lora:
        data["lora"] = {"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "down_proj"]}
    run(TrainerConfig.model_validate(data))
    return RunDir(out)


def logits(folder) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model(IDS).logits.detach()


def lora_logits(model_dir, adapter_dir) -> torch.Tensor:
    """The LoRA policy itself: the base with the published adapter (fp32) applied."""
    from transformers import AutoModelForCausalLM

    from trainer.config import LoraConfig
    from trainer.export import load_adapter
    from trainer.lora import apply_lora

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    apply_lora(model, LoraConfig(rank=4, alpha=8.0, target_modules=["q_proj", "down_proj"]))
    load_adapter(model, adapter_dir)
    return model(IDS).logits.detach()


def test_lora_export_merges_the_adapter(tiny_model_dir, tmp_path, capsys):
    rd = train(tiny_model_dir, tmp_path / "run", lora=True)
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


def test_full_run_export_is_the_trained_model(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    rd = train(tiny_model_dir, tmp_path / "run", lora=False)
    out = tmp_path / "model"
    assert run_command("export", [str(rd.root), "--step", "1", "--out", str(out)]) == 0
    exported = load_file(str(out / "model.safetensors"))
    published = load_file(str(rd.weight_dir(1) / "model.safetensors"))
    assert exported.keys() == published.keys()
    for name, tensor in published.items():
        torch.testing.assert_close(exported[name], tensor)


def test_user_errors_exit_2(tiny_model_dir, tmp_path, capsys):
    rd = train(tiny_model_dir, tmp_path / "run", lora=True)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    cases = [
        ([str(tmp_path / "nope"), "--out", "o"], "is not a run folder"),
        ([str(rd.root), "--step", "7", "--out", str(tmp_path / "o")], "weights: [1, 2])"),
        ([str(rd.root), "--out", str(tmp_path / "taken")], "already exists"),
        ([str(rd.root)], "--out"),
        ([str(rd.root), "--out", "o", "--dtype", "int8"], "invalid choice"),
    ]
    for args, words in cases:
        assert run_command("export", args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("rl export: error:") and words in err, err
    assert not (tmp_path / "o").exists()
