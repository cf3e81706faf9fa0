"""Checkpoints off the critical path: the state is copied during the step and written in a
thread; it counts (DONE) only once on disk, holds the state of its own step, and a failed
write is an error of the run, not a silent gap."""

import errno

import pytest
import torch

from rlcore import faults
from rlcore.runs.rundir import RunDir
from trainer import ckpt
from trainer.data import fake_batch
from trainer.train import run, setup_trainer, train_step


def test_a_checkpoint_holds_its_step_while_training_goes_on(
    tiny_model_dir, tmp_path, fake_config, cpu_world, monkeypatch
):
    trainer = setup_trainer(fake_config(tiny_model_dir, tmp_path), cpu_world)
    run_dir = RunDir(tmp_path)
    shape = (trainer.config.data.fake, 32, trainer.model.config.vocab_size)
    train_step(trainer, fake_batch(*shape, 0, 0))
    saved = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    moments = [s["exp_avg"].clone() for s in trainer.optimizer.state_dict()["state"].values()]
    monkeypatch.setenv(faults.CKPT_SAVE_DELAY_ENV, "1.0")
    args = (trainer.model, trainer.optimizer, trainer.scheduler, {})
    trainer.checkpointer.save(1, *args)
    assert not run_dir.part_done(1, "trainer")  # still being written ...
    train_step(trainer, fake_batch(*shape, 1, 0))  # ... while the next step trains
    trainer.checkpointer.close()
    assert run_dir.checkpoint_complete(1)

    fresh = setup_trainer(fake_config(tiny_model_dir, tmp_path / "other"), cpu_world)
    ckpt.load_checkpoint(run_dir, 1, fresh.model, fresh.optimizer, fresh.scheduler, cpu_world)
    for name, value in fresh.model.state_dict().items():
        torch.testing.assert_close(value, saved[name], msg=name)
    restored = [s["exp_avg"] for s in fresh.optimizer.state_dict()["state"].values()]
    assert len(restored) == len(moments) > 0, "the optimizer state came back"
    for value, expected in zip(restored, moments, strict=True):
        torch.testing.assert_close(value, expected)


def test_a_failed_background_save_stops_the_run_and_keeps_the_last_good_checkpoint(
    tiny_model_dir, tmp_path, fake_config, monkeypatch
):
    from torch.distributed.checkpoint import filesystem

    write_item, ckpt_step = filesystem._write_item, [0]

    def full_at_step_4(*args, **kwargs):  # step 2's save writes, step 4's finds the disk full
        if ckpt_step[0] == 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_item(*args, **kwargs)

    start_save = ckpt.start_save

    def tracking_start(run_dir, step, *args):
        ckpt_step[0] = step
        return start_save(run_dir, step, *args)

    monkeypatch.setattr(filesystem, "_write_item", full_at_step_4)
    monkeypatch.setattr(ckpt, "start_save", tracking_start)
    config = fake_config(tiny_model_dir, tmp_path, max_steps=4, ckpt={"interval": 2})
    with pytest.raises(BaseException, match="No space left on device"):
        run(config)
    run_dir = RunDir(tmp_path)
    assert run_dir.latest_checkpoint() == 2 and not run_dir.part_done(4, "trainer")


def test_foreground_saves_still_work(tiny_model_dir, tmp_path, fake_config):
    ckpt_config = {"interval": 1, "background": False}
    run(fake_config(tiny_model_dir, tmp_path, max_steps=2, ckpt=ckpt_config))
    assert RunDir(tmp_path).complete_checkpoints() == [1, 2]


def test_background_saves_go_on_where_torch_closes_the_stager_after_each_copy(
    tiny_model_dir, tmp_path, fake_config, cpu_world, monkeypatch
):
    """torch 2.11's DefaultStager closes its state-dict copier after every copy, and the next
    save through it failed (KeyError: <class 'type'>; seen on an H100), or, given a new stager,
    copied into freshly allocated (on a GPU: pinned) memory each time: here torch is made to
    close it, and every checkpoint of the run still lands, each holding its own step, each
    staged into the same host copies."""
    from torch.distributed.checkpoint.staging import DefaultStager

    stage_once, copies = DefaultStager._stage, []

    def as_in_torch_2_11(self, state_dict, **kwargs):
        staged = stage_once(self, state_dict, **kwargs)
        copies.append({t.data_ptr() for t in staged["model"].values()})
        self._state_dict_stager.close()
        return staged

    monkeypatch.setattr(DefaultStager, "_stage", as_in_torch_2_11)
    run(fake_config(tiny_model_dir, tmp_path, max_steps=4, ckpt={"interval": 1}))
    run_dir = RunDir(tmp_path)
    assert run_dir.complete_checkpoints() == [1, 2, 3, 4]
    assert len(copies) == 3 and copies[0] == copies[1] == copies[2], "host copies are reused"
    fresh = setup_trainer(fake_config(tiny_model_dir, tmp_path / "fresh"), cpu_world)
    for step in (2, 3):  # staged after torch closed the copier, and whole
        args = (fresh.model, fresh.optimizer, fresh.scheduler, cpu_world)
        assert ckpt.load_checkpoint(run_dir, step, *args)["step"] == step
