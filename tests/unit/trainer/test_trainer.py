"""The trainer runtime in-process on the tiny model: steps, weights, checkpoints, metrics."""

import json
from pathlib import Path

import pytest
import torch

from inference.weight_dirs import check_weight_dir, tensor_shapes
from rlcore.errors import ConfigError
from rlcore.runs.rundir import RunDir
from trainer.ckpt import prune_checkpoints
from trainer.data import fake_batch
from trainer.train import run, setup_trainer, train_step
from trainer.weights import prune_weights


def test_every_parameter_changes_after_one_step(tiny_model_dir, tmp_path, fake_config, cpu_world):
    trainer = setup_trainer(fake_config(tiny_model_dir, tmp_path), cpu_world)
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    batch = fake_batch(trainer.config.data.fake, 32, trainer.model.config.vocab_size, 0, 0)
    metrics = train_step(trainer, batch)
    for name, param in trainer.model.named_parameters():
        assert not torch.equal(param, before[name]), f"{name} did not change"
    assert metrics["grad_norm"] > 0 and metrics["tokens_per_s"] > 0
    assert 0 <= metrics["clip_frac"] <= 1 and metrics["entropy"] > 0


def test_run_publishes_loadable_weights_and_checkpoints(tiny_model_dir, tmp_path, fake_config):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run(fake_config(tiny_model_dir, tmp_path, max_steps=3, ckpt={"interval": 1, "keep": 2}))
    rd = RunDir(tmp_path)
    assert rd.complete_checkpoints() == [2, 3]  # keep = 2
    assert all(rd.weights_stable(s) for s in (2, 3))  # async_level 1: async_level + 1 kept
    assert not rd.weight_dir(1).exists() and not rd.weight_dir(0).exists()
    model = AutoModelForCausalLM.from_pretrained(rd.weight_dir(3))
    # what inference checks before it swaps weights in
    check_weight_dir(rd.weight_dir(3), tmp_path.resolve(), tensor_shapes(Path(tiny_model_dir)))
    assert model.dtype == torch.float32
    config = json.loads((rd.weight_dir(3) / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert AutoTokenizer.from_pretrained(rd.weight_dir(3)).chat_template
    records = [json.loads(line) for line in rd.metrics.read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    for key in (
        "loss",
        "entropy",
        "mismatch_kl",
        "clip_frac",
        "grad_norm",
        "lr",
        "tokens_per_s",
        "peak_memory_gib",
        "step_time_s",
    ):
        assert all(key in r for r in records), key
    assert (rd.config_file("trainer")).exists()


def test_bf16_compute_keeps_fp32_master_weights_and_publishes_bf16(
    tiny_model_dir, tmp_path, fake_config, cpu_world
):
    from safetensors import safe_open

    cfg = fake_config(
        tiny_model_dir,
        tmp_path,
        max_steps=1,
        ckpt={"enabled": False},
        model={"name": str(tiny_model_dir), "dtype": "bfloat16"},
        optim={"lr": 1e-6},
    )
    trainer = setup_trainer(cfg, cpu_world)
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    batch = fake_batch(cfg.data.fake, 32, trainer.model.config.vocab_size, 0, 0)
    train_step(trainer, batch)
    # At lr 1e-6 a bf16 parameter would not move (updates below half an ulp round away);
    # the fp32 master copy moves everywhere.
    for name, param in trainer.model.named_parameters():
        assert not torch.equal(param, before[name]), f"{name} did not move at lr 1e-6"
        assert param.dtype == torch.float32
    trainer.sender.publish(1)
    trainer.sender.close()  # the folder is written in the background
    folder = RunDir(tmp_path).weight_dir(1)
    with safe_open(folder / "model.safetensors", "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"


def test_checkpoint_round_trip_restores_optimizer_and_step(
    tiny_model_dir, tmp_path, fake_config, cpu_world
):
    run(fake_config(tiny_model_dir, tmp_path, max_steps=2))
    resumed = setup_trainer(
        fake_config(tiny_model_dir, tmp_path, max_steps=3, ckpt={"resume_step": -1}), cpu_world
    )
    assert resumed.start_step == 2
    assert resumed.scheduler.last_epoch == 2
    state = resumed.optimizer.state_dict()["state"]
    assert state and all(int(s["step"]) == 2 for s in state.values())


def test_fresh_start_refuses_a_dir_with_checkpoints(
    tiny_model_dir, tmp_path, fake_config, cpu_world
):
    run(fake_config(tiny_model_dir, tmp_path, max_steps=1))
    with pytest.raises(ConfigError, match="resume-step -1"):
        setup_trainer(fake_config(tiny_model_dir, tmp_path), cpu_world)
    with pytest.raises(ConfigError, match="no complete checkpoint for step 5"):
        setup_trainer(fake_config(tiny_model_dir, tmp_path, ckpt={"resume_step": 5}), cpu_world)


def test_prune_weights_keeps_what_the_orchestrator_may_need(tmp_path):
    rd = RunDir(tmp_path)
    for s in range(6):
        rd.weight_dir(s).mkdir(parents=True)
    prune_weights(rd, 5, async_level=2)
    assert sorted(p.name for p in rd.weights.iterdir()) == ["step_3", "step_4", "step_5"]


def test_prune_checkpoints_spares_incomplete_ones(tmp_path):
    rd = RunDir(tmp_path)
    for s in (2, 4, 6, 8):
        (rd.checkpoint_dir(s) / "trainer").mkdir(parents=True)
        if s != 8:
            (rd.checkpoint_dir(s) / "MANIFEST").write_text("{}")
    prune_checkpoints(rd, keep=1)
    assert rd.complete_checkpoints() == [6]
    assert rd.checkpoint_dir(8).exists()  # being written: untouched


def test_trainer_alone_logs_to_wandb_offline_and_resumes_same_run(
    tiny_model_dir, tmp_path, monkeypatch, fake_config, fake_wandb
):
    fake = fake_wandb
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    wandb = {"project": "p"}
    run(fake_config(tiny_model_dir, tmp_path, wandb=wandb))
    assert fake.inits[0]["mode"] == "offline" and fake.inits[0]["id"] is None
    assert [step for step, _ in fake.logged] == [1, 2]
    assert "trainer/loss" in fake.logged[0][1]
    run(fake_config(tiny_model_dir, tmp_path, max_steps=3, wandb=wandb, ckpt={"resume_step": -1}))
    assert fake.inits[1]["id"] == "run-123" and fake.inits[1]["resume"] == "allow"
    assert [step for step, _ in fake.logged] == [1, 2, 3]


def test_missing_batch_times_out_naming_the_path(tiny_model_dir, tmp_path, fake_config):
    config = fake_config(tiny_model_dir, tmp_path, data={"wait_timeout_s": 0.5})
    with pytest.raises(TimeoutError, match=r"rollouts/step_0"):
        run(config)
    assert RunDir(tmp_path).weights_stable(0)  # the base policy is published first


def nan_batch(trainer):
    batch = fake_batch(trainer.config.data.fake, 32, trainer.model.config.vocab_size, 0, 0)
    batch.logprobs[batch.prompt_lens[0]] = float("nan")  # sample 0's first completion token
    return batch


# the skipped update never calls optimizer.step(), yet the schedule moves on with the step count
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_nonfinite_update_is_skipped_and_weights_keep(
    tiny_model_dir, tmp_path, fake_config, cpu_world
):
    trainer = setup_trainer(fake_config(tiny_model_dir, tmp_path), cpu_world)
    before = {k: v.detach().clone() for k, v in trainer.model.named_parameters()}
    metrics = train_step(trainer, nan_batch(trainer))
    assert metrics["skipped_update"] == 1.0
    for name, param in trainer.model.named_parameters():
        assert torch.equal(param, before[name]) and torch.isfinite(param).all(), name
    assert trainer.scheduler.last_epoch == 1  # the step is consumed
    assert (
        train_step(trainer, fake_batch(trainer.config.data.fake, 32, 1000, 1, 0))["skipped_update"]
        == 0.0
    )


def test_nonfinite_update_can_stop_the_run(tiny_model_dir, tmp_path, fake_config, cpu_world):
    from trainer.train import TrainingError

    config = fake_config(tiny_model_dir, tmp_path, on_nonfinite="stop")
    trainer = setup_trainer(config, cpu_world)
    with pytest.raises(TrainingError, match="non-finite update.*lower optim.lr"):
        train_step(trainer, nan_batch(trainer))
