"""`rl export`'s user errors exit 2 before anything is written. The exports themselves run the
trainer's export in a process of its own: tests/integration/test_export_models.py."""

import torch

from launcher.commands import run_command
from rlcore.runs.rundir import RunDir
from trainer.train import run

IDS = torch.tensor([[1, 5, 9, 42, 7, 3, 11]])


def train(fake_config, model_dir, out, lora: bool) -> RunDir:
    """Two steps (LoRA or full weights), a checkpoint after each."""
    extra = {"lora": {"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "down_proj"]}}
    options = {"optim": {"lr": 1e-2}, "ckpt": {"interval": 1}, **(extra if lora else {})}
    run(fake_config(model_dir, out, **options))
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


def test_user_errors_exit_2(tiny_model_dir, tmp_path, capsys, fake_config, as_a_user):
    rd = train(fake_config, tiny_model_dir, tmp_path / "run", lora=True)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("")
    (tmp_path / "read-only").mkdir(mode=0o555)
    (tmp_path / "a-file").write_text("")
    cases = [
        ([str(tmp_path / "nope"), "--out", "o"], "is not a run folder"),
        ([str(rd.root), "--step", "7", "--out", str(tmp_path / "o")], "weights: [1, 2])"),
        ([str(rd.root), "--out", str(tmp_path / "taken")], "already exists"),
        ([str(rd.root)], "--out"),
        ([str(rd.root), "--out", "o", "--dtype", "int8"], "invalid choice"),
        ([str(rd.root), "--out", str(tmp_path / "read-only" / "o")], "read-only is not writable"),
        ([str(rd.root), "--out", str(tmp_path / "a-file" / "o")], "a-file is a file, not a"),
    ]
    for args, words in cases:
        assert run_command("export", args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("rl export: error:") and words in err, err
        assert "Traceback" not in err, err
    assert not (tmp_path / "o").exists()
    assert list((tmp_path / "read-only").iterdir()) == []
