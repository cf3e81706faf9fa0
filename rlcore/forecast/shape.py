"""A model's shape without loading it: an HF folder's config.json and safetensors headers, or a
GGUF file's header (the bundled default model before its first conversion)."""

import json
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

SAFETENSORS_MAX_HEADER = 100 << 20
"""The safetensors format's own bound on a header's JSON."""
GGUF_MAGIC = b"GGUF"
GGUF_MAX_HEADER_ITEMS = 1 << 24
"""Bound on any count read from a GGUF header (a damaged file is not a reason to loop)."""


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs of a decoder-only transformer."""

    params: int
    hidden: int
    layers: int
    vocab: int
    heads: int = 0
    """Attention heads (0: unknown, taken as hidden / 64)."""
    kv_heads: int = 0
    """Key/value heads (GQA); 0: as many as `heads`."""
    head_dim: int = 0
    """Each head's width; 0: hidden / heads."""
    intermediate: int = 0
    """The MLP's width; 0: unknown (taken as 4 x hidden)."""
    tied: bool = True
    """The output head shares the input embedding's matrix."""
    architecture: str = ""
    """Its transformers class (`LlamaForCausalLM`); empty where its files do not say."""

    @property
    def kv_width(self) -> int:
        """Keys plus values per token and layer, in elements."""
        heads = self.heads or max(self.hidden // 64, 1)
        dim = self.head_dim or self.hidden // heads
        return 2 * (self.kv_heads or heads) * dim

    @property
    def query_width(self) -> int:
        """Queries per token and layer, in elements: what attention's scores and values scale
        with (Qwen3-0.6B: 16 heads of 128, twice its hidden size)."""
        heads = self.heads or max(self.hidden // 64, 1)
        return heads * (self.head_dim or self.hidden // heads)

    @property
    def matmul_params(self) -> int:
        """Parameters a token's forward multiplies by: all but the embedding lookup (the
        output head counts once, tied or not)."""
        embedding = self.vocab * self.hidden
        return self.params - embedding + (embedding if self.tied else 0)


def _count(shape: list) -> int:
    count = 1
    for dim in shape:
        count *= int(dim)
    return count


def safetensors_header(file: Path) -> dict:
    """The JSON header of the safetensors `file`, read as untrusted data: a regular file only
    (a FIFO is never waited on), a header within the format's bound and the file's size;
    ValueError otherwise."""
    fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        size_on_disk = os.fstat(fd).st_size
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{file} is not a regular file")
        (size,) = struct.unpack("<Q", f.read(8))
        if size > min(SAFETENSORS_MAX_HEADER, size_on_disk - 8):
            raise ValueError(f"{file}: a header of {size} bytes")
        header = json.loads(f.read(size))
    if not isinstance(header, dict):
        raise ValueError(f"{file}: its header is no object")
    return header


def safetensors_params(folder: Path) -> int:
    """Elements over all *.safetensors files in `folder`, read from their JSON headers."""
    total = 0
    for file in folder.glob("*.safetensors"):
        header = safetensors_header(file)
        total += sum(_count(e["shape"]) for k, e in header.items() if k != "__metadata__")
    return total


def _positive(value: object) -> int:
    """A count config.json gives (hidden size, layers, ...): a positive int, else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"not a positive integer: {value!r:.40}")
    return value


def _optional(config: dict, key: str) -> int:
    value = config.get(key)
    return 0 if value is None else _positive(value)


def folder_shape(folder: Path) -> ModelShape | None:
    """The shape of the HF model in `folder`; None when its files do not say."""
    from rlcore.errors import ConfigError
    from rlcore.files.user_files import read_user_bytes

    try:
        config = json.loads(read_user_bytes(folder / "config.json", "the model's config.json"))
        architecture = named_architecture(config.get("architectures"))
        config = config.get("text_config", config)
        params = safetensors_params(folder)
        if not params:
            return None
        return ModelShape(
            params,
            _positive(config["hidden_size"]),
            _positive(config["num_hidden_layers"]),
            _positive(config["vocab_size"]),
            heads=_optional(config, "num_attention_heads"),
            kv_heads=_optional(config, "num_key_value_heads"),
            head_dim=_optional(config, "head_dim"),
            intermediate=_optional(config, "intermediate_size"),
            tied=bool(config.get("tie_word_embeddings", True)),
            architecture=architecture,
        )
    except (ConfigError, OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # a JSON error is a ValueError
    except (RecursionError, struct.error):
        return None


ARCHITECTURE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,99}")
"""A transformers class name, as a config.json's `architectures` names it."""


def named_architecture(found: object) -> str:
    """The first of a config.json's `architectures` where it is a class name, else ''."""
    first = found[0] if isinstance(found, list) and found else None
    return first if isinstance(first, str) and ARCHITECTURE.fullmatch(first) else ""


# GGUF value types (the format's own numbering) and the struct code of each fixed-size one.
_GGUF_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def _read(f: BinaryIO, code: str):
    size = struct.calcsize("<" + code)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("GGUF header ends early")
    return struct.unpack("<" + code, data)[0]


def _bounded(n: int) -> int:
    if n > GGUF_MAX_HEADER_ITEMS:
        raise ValueError(f"GGUF header count {n} is out of bounds")
    return n


def _string(f: BinaryIO) -> str:
    return f.read(_bounded(_read(f, "Q"))).decode(errors="replace")


def _value(f: BinaryIO, kind: int, keep: bool):
    """One value of type `kind`; arrays are skipped (None) unless `keep`."""
    if kind in _GGUF_SCALARS:
        return _read(f, _GGUF_SCALARS[kind])
    if kind == _GGUF_STRING:
        return _string(f)
    if kind == _GGUF_ARRAY:
        item, count = _read(f, "I"), _bounded(_read(f, "Q"))
        if item in _GGUF_SCALARS and not keep:
            f.seek(count * struct.calcsize("<" + _GGUF_SCALARS[item]), 1)
            return None
        values = [_value(f, item, keep) for _ in range(count)]
        return values if keep else None
    raise ValueError(f"unknown GGUF value type {kind}")


def gguf_header(path: Path) -> tuple[dict, dict[str, list[int]]]:
    """(metadata without arrays, {tensor name: shape}) of a GGUF file (versions 2 and 3)."""
    with path.open("rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise ValueError(f"{path.name} is not a GGUF file")
        version = _read(f, "I")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} is not read here")
        num_tensors, num_fields = _bounded(_read(f, "Q")), _bounded(_read(f, "Q"))
        fields = {}
        for _ in range(num_fields):
            key = _string(f)
            fields[key] = _value(f, _read(f, "I"), keep=False)
        tensors = {}
        for _ in range(num_tensors):
            name = _string(f)
            dims = [_read(f, "Q") for _ in range(_bounded(_read(f, "I")))]
            _read(f, "I"), _read(f, "Q")  # its type and offset
            tensors[name] = dims
    return fields, tensors


def gguf_shape(path: Path) -> ModelShape | None:
    """The shape of the model in a GGUF file, from its header only; None when it does not say."""
    try:
        fields, tensors = gguf_header(path)
        arch = fields["general.architecture"]
        hidden = int(fields[f"{arch}.embedding_length"])
        vocab = fields.get(f"{arch}.vocab_size") or tensors["token_embd.weight"][-1]
        return ModelShape(
            params=sum(_count(dims) for dims in tensors.values()),
            hidden=hidden,
            layers=int(fields[f"{arch}.block_count"]),
            vocab=int(vocab),
            heads=int(fields.get(f"{arch}.attention.head_count") or 0),
            kv_heads=int(fields.get(f"{arch}.attention.head_count_kv") or 0),
            intermediate=int(fields.get(f"{arch}.feed_forward_length") or 0),
            tied="output.weight" not in tensors,
            architecture=named_architecture([f"{str(arch).capitalize()}ForCausalLM"]),
        )
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None


def shape_of(name: str) -> tuple[ModelShape | None, str]:
    """(the shape of model `name`, where it was read) from its local folder, or for the bundled
    default from its GGUF header before the first conversion; (None, why) otherwise."""
    from rlcore.errors import ConfigError
    from rlcore.host.models import (
        DEFAULT_MODEL,
        ModelNotFoundError,
        bundled_gguf_path,
        model_folder,
    )

    try:
        folder = model_folder(name)
    except ConfigError:
        folder = None
    if folder is not None:
        shape = folder_shape(folder)
        return shape, "its config.json and safetensors headers" if shape else (
            f"{folder} has no readable config.json and safetensors headers"
        )
    if name == DEFAULT_MODEL:
        try:
            shape = gguf_shape(bundled_gguf_path())
        except ModelNotFoundError as err:
            return None, str(err)
        return (
            shape,
            "the bundled GGUF's header" if shape else "the bundled GGUF's header is unreadable",
        )
    return None, f"no local folder for {name!r} (a hub model's shape is not fetched)"
