"""The project's import graph, read from the source (every import, also those inside
functions): which module imports which."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGES = ("rlcore", "launcher", "trainer", "orchestrator", "inference")
ROLES = ("trainer", "orchestrator", "inference")


def tree_packages() -> dict[str, Path]:
    """Every package of the tree and the folder it is imported from: the repository's own
    (the product's and benchmarks/) and each bundled environment under environments/ (a
    package of its own: `rl_envs`, `rl_tasks`, ...). Tests are not packages."""
    found = {}
    for root in (REPO, REPO / "environments"):
        for init in sorted(root.glob("*/__init__.py")):
            found[init.parent.name] = root
    return found


def module_name(path: Path, root: Path = REPO) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules(packages: dict[str, Path] | None = None) -> dict[str, Path]:
    """Module name -> file, for `packages` (name -> the folder it is imported from; default:
    the product's PACKAGES)."""
    packages = dict.fromkeys(PACKAGES, REPO) if packages is None else packages
    return {
        module_name(path, root): path
        for package, root in packages.items()
        for path in (root / package).rglob("*.py")
        if "__pycache__" not in path.parts
    }


def imported_names(path: Path, module: str) -> set[str]:
    """Every module name an import statement in `path` names (relative ones resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(packages: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Project module -> the project modules it imports (`packages`: as `project_modules`)."""
    modules = project_modules(packages)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_names(path, module):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def package_of(module: str) -> str:
    return module.split(".")[0]
