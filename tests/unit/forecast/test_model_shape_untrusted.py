"""A model folder's config.json and safetensors headers are the user's files, read as untrusted
data by the estimate and the memory check (rlcore/forecast/shape.py): a FIFO is never waited
on, a damaged header never raises out, a wrong kind of value is no shape."""

import json
import os
import shutil
import struct

import pytest

from rlcore.errors import ConfigError
from rlcore.forecast.shape import folder_shape
from rlcore.host.models import model_folder


@pytest.fixture
def folder(tmp_path, tiny_model_dir):
    copy = tmp_path / "model"
    shutil.copytree(tiny_model_dir, copy)
    return copy


def safetensors(folder):
    return next(folder.glob("*.safetensors"))


def test_the_tiny_models_shape_is_read(folder):
    config = json.loads((folder / "config.json").read_text())
    shape = folder_shape(folder)
    assert (shape.hidden, shape.layers, shape.vocab) == (
        config["hidden_size"],
        config["num_hidden_layers"],
        config["vocab_size"],
    )


def test_a_fifo_config_json_is_no_shape_and_refused_as_a_model_folder(folder):
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")
    assert folder_shape(folder) is None  # returns: a plain read waited for a writer forever
    with pytest.raises(ConfigError, match="config.json is not a regular file"):
        model_folder(str(folder))


@pytest.mark.parametrize(
    "head",
    [
        struct.pack("<Q", 2**63 - 1),  # a header larger than anything: OverflowError before
        struct.pack("<Q", 10**9),  # larger than the file
        b"\x01",  # shorter than the length field
        struct.pack("<Q", 4) + b"[1,2",  # not JSON
        struct.pack("<Q", 6) + b"[1, 2]",  # JSON, no object
        struct.pack("<Q", 25) + b'{"w": {"shape": ["x"]}}  ',  # a shape of words
    ],
)
def test_a_damaged_safetensors_header_is_no_shape(folder, head):
    safetensors(folder).write_bytes(head)
    assert folder_shape(folder) is None


def test_a_fifo_safetensors_file_is_not_waited_on(folder):
    file = safetensors(folder)
    file.unlink()
    os.mkfifo(file)
    assert folder_shape(folder) is None


@pytest.mark.parametrize("value", ["1024", -1, 0, True, 1.5, None, [64]])
def test_a_wrong_kind_of_count_in_config_json_is_no_shape(folder, value):
    config = json.loads((folder / "config.json").read_text())
    config["hidden_size"] = value
    (folder / "config.json").write_text(json.dumps(config))
    assert folder_shape(folder) is None


def test_a_deeply_nested_config_json_is_no_shape(folder):
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    assert folder_shape(folder) is None
