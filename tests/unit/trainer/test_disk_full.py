"""Fault matrix, disk full: ENOSPC in the middle of a checkpoint save leaves the previous
checkpoint the latest, and it still loads."""

import errno

import pytest
import torch

from rlcore.runs.rundir import RunDir
from trainer import ckpt
from trainer.data import fake_batch
from trainer.train import setup_trainer, train_step


def test_enospc_mid_save_keeps_previous_checkpoint(
    tiny_model_dir, tmp_path, monkeypatch, fake_config, cpu_world
):
    trainer = setup_trainer(fake_config(tiny_model_dir, tmp_path), cpu_world)
    run = RunDir(tmp_path)
    shape = (trainer.config.data.fake, 32, trainer.model.config.vocab_size)

    def save(step: int) -> None:
        args = (trainer.optimizer, trainer.scheduler, cpu_world, {}, ("trainer",))
        ckpt.save_checkpoint(run, step, trainer.model, *args)

    train_step(trainer, fake_batch(*shape, 0, 0))
    save(1)
    saved = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    train_step(trainer, fake_batch(*shape, 1, 0))

    def disk_full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt.torch, "save", disk_full)  # DCP's writer and the rank file use it
    with pytest.raises(BaseException) as failure:  # DCP wraps it in a BaseException
        save(2)
    assert "No space left on device" in str(failure.value)
    monkeypatch.undo()

    assert (run.checkpoint_dir(2) / "trainer").exists() and not run.checkpoint_complete(2)
    assert run.latest_checkpoint() == 1 and run.resolve_resume_step(-1) == 1
    fresh = setup_trainer(fake_config(tiny_model_dir, tmp_path / "other"), cpu_world)
    ckpt.load_checkpoint(run, 1, fresh.model, fresh.optimizer, fresh.scheduler, cpu_world)
    for name, value in fresh.model.state_dict().items():
        torch.testing.assert_close(value, saved[name], msg=name)


def test_disk_full_is_recognised_through_wrappers():
    from rlcore.files.disk_full import is_disk_full

    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("checkpoint write failed") from inner
    except RuntimeError as outer:
        assert is_disk_full(outer)
    assert not is_disk_full(RuntimeError("something else"))
