"""Weight publishing off the critical path: the step snapshots the weights, a thread writes the
folder; STABLE only when complete, one write in flight, errors reach the training thread, and
`weight_transfer.dir` keeps the folders elsewhere (e.g. /dev/shm)."""

import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from inference.weight_dirs import WeightDirError, allowed_root, check_inside
from rlcore.errors import ConfigError
from rlcore.runs.rundir import RunDir
from trainer import weights
from trainer.train import run, setup_trainer


def published(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def test_the_folder_holds_the_weights_of_its_step_while_training_goes_on(
    tiny_model_dir, tmp_path, fake_config, cpu_world, monkeypatch
):
    trainer = setup_trainer(fake_config(tiny_model_dir, tmp_path), cpu_world)
    run_dir = RunDir(tmp_path)
    release = threading.Event()
    write = weights.write_policy

    def slow_write(*args):
        release.wait(timeout=30)
        write(*args)

    monkeypatch.setattr(weights, "write_policy", slow_write)
    expected = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    trainer.sender.publish(1)
    assert not run_dir.weights_stable(1)  # the write is still in flight ...
    with torch.no_grad():  # ... while the next step changes the fp32 weights in place
        for param in trainer.model.parameters():
            param.add_(1.0)
    release.set()
    trainer.sender.close()
    assert run_dir.weights_stable(1)
    saved = published(run_dir.weight_dir(1))
    assert saved.keys() <= expected.keys() and len(saved) > 0
    for name, tensor in saved.items():
        torch.testing.assert_close(tensor, expected[name], msg=name)
    timings = trainer.sender.metrics()
    assert {"publish_copy_s", "publish_wait_s", "publish_write_s"} <= timings.keys()


def test_never_more_than_one_write_in_flight(
    tiny_model_dir, tmp_path, fake_config, cpu_world, monkeypatch
):
    trainer = setup_trainer(fake_config(tiny_model_dir, tmp_path), cpu_world)
    active, most = [0], [0]
    write = weights.write_policy

    def counting_write(*args):
        active[0] += 1
        most[0] = max(most[0], active[0])
        time.sleep(0.2)
        write(*args)
        active[0] -= 1

    monkeypatch.setattr(weights, "write_policy", counting_write)
    for step in (1, 2, 3):
        trainer.sender.publish(step)
    trainer.sender.close()
    assert most[0] == 1
    run_dir = RunDir(tmp_path)  # async_level 1: the writer kept the newest two, pruned step 1
    assert run_dir.weights_stable(2) and run_dir.weights_stable(3)
    assert not run_dir.weight_dir(1).exists()
    assert trainer.sender.metrics()["publish_wait_s"] > 0.1  # step 3 waited for step 2's write


def test_a_failed_background_write_stops_the_run_and_leaves_no_stable_folder(
    tiny_model_dir, tmp_path, fake_config, monkeypatch
):
    def disk_full(folder, *args, **kwargs):
        (folder / "model.safetensors").write_bytes(b"half")
        raise OSError(28, "No space left on device")

    config = fake_config(tiny_model_dir, tmp_path, max_steps=3, ckpt={"enabled": False})
    original = weights.write_model_folder
    calls = []

    def fail_from_step_2(folder, *args):
        calls.append(folder)
        return (disk_full if len(calls) >= 3 else original)(folder, *args)  # 0, 1 write fine

    monkeypatch.setattr(weights, "write_model_folder", fail_from_step_2)
    with pytest.raises(OSError, match="No space left"):
        run(config)
    run_dir = RunDir(tmp_path)
    assert run_dir.weights_stable(1) and not run_dir.weight_dir(2).exists()
    assert not list(run_dir.weights.glob(".step_2.tmp*"))  # the half folder is removed


def test_weights_can_live_in_another_folder(tiny_model_dir, tmp_path, fake_config):
    shm = tmp_path / "shm"
    config = fake_config(
        tiny_model_dir,
        tmp_path / "run",
        max_steps=2,
        ckpt={"enabled": False},
        weight_transfer={"dir": str(shm)},
    )
    run(config)
    run_dir = RunDir(tmp_path / "run")
    assert run_dir.weights.is_symlink() and run_dir.weights_stable(2)
    (target,) = shm.glob("rl-weights-*")
    assert (target / "step_2" / "STABLE").exists()
    # inference loads from the run's own folder there (its marker names the run), nothing else
    root = allowed_root(run_dir)
    assert root == target.resolve()
    assert check_inside(run_dir.weight_dir(2), root) == (target / "step_2").resolve()
    for elsewhere in (tmp_path, tmp_path / "run", shm):
        with pytest.raises(WeightDirError, match="outside the allowed root"):
            check_inside(elsewhere, root)
    (target / ".rl-weights").write_text('{"run_id": "another run"}\n')
    with pytest.raises(WeightDirError, match="not this run's policy folder"):
        allowed_root(run_dir)


def test_an_unusable_weights_dir_names_the_setting(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match=r"weight_transfer.dir = .*file.*unset it"):
        weights.place_weights(RunDir(tmp_path / "run"), blocker)
