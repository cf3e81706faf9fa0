"""The trainer on a CUDA GPU (`pytest -m gpu`, part of benchmarks/gpu_suite.sh): the FSDP2 step
in bf16 on fp32 master weights, a resumed run bit-exact with an uninterrupted one, the
background checkpoint, and the out-of-memory message. Skipped where no GPU is visible."""

import pytest
import torch
from safetensors.torch import load_file

from rlcore.runs.rundir import RunDir
from trainer.data import fake_batch
from trainer.dist import setup_world, teardown_world
from trainer.train import TrainingError, run, setup_trainer, train_step

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.fixture
def gpu_world():
    world = setup_world()
    yield world
    teardown_world(world)


def bf16_config(fake_config, model_dir, out, **overrides):
    model = {"name": str(model_dir), "dtype": "bfloat16"}
    return fake_config(model_dir, out, model=model, **overrides)


def test_fsdp2_bf16_step_moves_fp32_masters(tiny_model_dir, tmp_path, fake_config, gpu_world):
    cfg = bf16_config(
        fake_config, tiny_model_dir, tmp_path, optim={"lr": 1e-6}, ckpt={"enabled": False}
    )
    trainer = setup_trainer(cfg, gpu_world)
    params = dict(trainer.model.named_parameters())
    assert all(type(p).__name__ == "DTensor" for p in params.values())  # FSDP2-sharded
    assert {p.dtype for p in params.values()} == {torch.float32}
    before = {k: p.full_tensor().clone() for k, p in params.items()}
    batch = fake_batch(cfg.data.fake, 32, trainer.model.config.vocab_size, 0, 0)
    metrics = train_step(trainer, batch)
    assert torch.isfinite(torch.tensor(metrics["loss"])) and metrics["peak_memory_gib"] > 0
    for name, param in trainer.model.named_parameters():  # lr 1e-6 moves fp32, not bf16
        assert not torch.equal(param.full_tensor(), before[name]), name
    trainer.sender.close()


def test_resume_is_bit_exact(tiny_model_dir, tmp_path, fake_config):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    run(bf16_config(fake_config, tiny_model_dir, whole, max_steps=3, ckpt={"interval": 1}))
    run(bf16_config(fake_config, tiny_model_dir, cut, max_steps=2, ckpt={"interval": 1}))
    run(
        bf16_config(
            fake_config, tiny_model_dir, cut, max_steps=3, ckpt={"interval": 1, "resume_step": -1}
        )
    )
    a = load_file(str(RunDir(whole).weight_dir(3) / "model.safetensors"))
    b = load_file(str(RunDir(cut).weight_dir(3) / "model.safetensors"))
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert RunDir(cut).complete_checkpoints()[-1] == 3  # written by the background saver


def test_out_of_memory_names_the_knobs(tiny_model_dir, tmp_path, fake_config, gpu_world):
    cfg = bf16_config(
        fake_config,
        tiny_model_dir,
        tmp_path,
        seq_len=65536,
        data={"fake": {"batch_size": 4}},
        ckpt={"enabled": False},
    )
    # Set up first: NCCL makes its communicator (and its buffers) at the first collective, and
    # a communicator that cannot allocate fails with its own error, not the step's.
    trainer = setup_trainer(cfg, gpu_world)
    free, _ = torch.cuda.mem_get_info()
    hog = torch.empty(free - 256 * 2**20, dtype=torch.uint8, device="cuda")  # 256 MiB left
    try:
        batch = fake_batch(cfg.data.fake, cfg.seq_len, trainer.model.config.vocab_size, 0, 0)
        with pytest.raises(TrainingError, match=r"out of memory .*micro_batch_tokens.*seq_len"):
            train_step(trainer, batch)
    finally:
        del hog
        torch.cuda.empty_cache()
