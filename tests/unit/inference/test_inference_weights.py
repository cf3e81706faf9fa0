"""inference.weights: which folders /update_weights accepts, checked without a server."""

import json
import shutil

import pytest

from inference.weight_dirs import WeightDirError, check_weight_dir, tensor_shapes


@pytest.fixture
def root(tmp_path, tiny_model_dir):
    shutil.copytree(tiny_model_dir, tmp_path / "weights" / "step_1")
    return tmp_path


def check(root, folder, tiny_model_dir):
    return check_weight_dir(
        root / folder, (root / "weights").resolve(), tensor_shapes(tiny_model_dir)
    )


def test_matching_folder_is_accepted(root, tiny_model_dir):
    assert check(root, "weights/step_1", tiny_model_dir) == (root / "weights/step_1").resolve()


@pytest.mark.parametrize(
    ("folder", "status", "words"),
    [
        ("weights/step_9", 404, "does not exist"),
        ("weights", 422, "config.json"),
        ("weights/step_1/../../..", 403, "outside the allowed root"),
        (".", 403, "outside the allowed root"),
    ],
)
def test_refused_folders(root, tiny_model_dir, folder, status, words):
    with pytest.raises(WeightDirError, match=words) as info:
        check(root, folder, tiny_model_dir)
    assert info.value.status == status


def test_corrupt_safetensors(root, tiny_model_dir):
    file = root / "weights/step_1/model.safetensors"
    file.write_bytes(file.read_bytes()[:1000])
    with pytest.raises(WeightDirError, match="not a readable safetensors file"):
        check(root, "weights/step_1", tiny_model_dir)


def test_no_safetensors(root, tiny_model_dir):
    (root / "weights/step_1/model.safetensors").unlink()
    with pytest.raises(WeightDirError, match="no \\*.safetensors"):
        check(root, "weights/step_1", tiny_model_dir)


def test_other_architecture(root, tiny_model_dir):
    import torch
    from safetensors.torch import save_file

    folder = root / "weights/step_1"
    tensors = {k: torch.zeros(s) for k, s in tensor_shapes(folder).items()}
    tensors["model.norm.weight"] = torch.zeros(65)
    tensors["model.layers.7.extra.weight"] = torch.zeros(1)
    del tensors["model.embed_tokens.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(WeightDirError, match="does not match the served model") as info:
        check(root, "weights/step_1", tiny_model_dir)
    message = str(info.value)
    assert "missing tensors ['model.embed_tokens.weight']" in message
    assert "unexpected tensors" in message and "model.norm.weight has shape (65,)" in message


def test_invalid_config_json(root, tiny_model_dir):
    (root / "weights/step_1/config.json").write_text("{not json")
    with pytest.raises(WeightDirError, match="no valid config.json"):
        check(root, "weights/step_1", tiny_model_dir)
    json.loads((tiny_model_dir / "config.json").read_text())  # the shared fixture is untouched


def test_a_file_linked_from_outside_is_refused(root, tiny_model_dir, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere")
    shutil.copy(tiny_model_dir / "model.safetensors", outside / "model.safetensors")
    folder = root / "weights" / "step_1"
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to(outside / "model.safetensors")
    with pytest.raises(WeightDirError, match="links outside the allowed root") as info:
        check(root, "weights/step_1", tiny_model_dir)
    assert info.value.status == 403


def test_a_step_folder_linked_from_outside_is_refused(root, tiny_model_dir, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "policy"
    shutil.copytree(tiny_model_dir, outside)
    (root / "weights" / "step_2").symlink_to(outside, target_is_directory=True)
    with pytest.raises(WeightDirError, match="outside the allowed root"):
        check(root, "weights/step_2", tiny_model_dir)
