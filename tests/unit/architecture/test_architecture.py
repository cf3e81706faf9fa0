"""The floors hold, for every first-party package of the tree (the bundled environments'
included): rl_files -> rlcore -> roles (trainer, orchestrator, inference) -> launcher ->
benchmarks; the environments beside them, importing only each other and rl_files. Inside
rlcore, each subpackage imports only what its docstring's `Imports:` line names. Read from the
source, lazy imports inside functions included."""

import ast
import re

from import_graph import REPO, ROLES, cycles, import_graph, package_of, tree_packages

PRODUCT_FLOORS = {
    "rl_files": 0,
    "rlcore": 1,
    "trainer": 2,
    "orchestrator": 2,
    "inference": 2,
    "launcher": 3,
    "benchmarks": 4,
}
"""Each product package imports only floors below its own (and itself)."""
ENVIRONMENTS = {"rl_envs", "rl_tasks", "rl_add_digits", "rl_add_digits_v1", "rl_repeat_word"}
ENVIRONMENTS |= {"rl_guess_number"}
"""The bundled environments (environments/): they import only each other and rl_files."""
MAY_IMPORT_ENVIRONMENTS = {"launcher", "benchmarks"}
"""Who may import a bundled environment: what the launcher checks of a tasks file is theirs."""
LIGHT_ROLE_MODULES = {"config", "speed_policy"}
"""What the launcher may import of a role: its schema and the light policy it makes for it."""
HEAVY = ("torch", "vllm", "verifiers", "transformers", "accelerate", "datasets", "peft")
COMMANDS = "launcher.commands"
"""The `rl` subcommands' package: its `__init__` is their registry and dispatcher."""
CLI_FRONT = {"launcher.rl", "launcher.interactive"}
"""`rl` and bare `rl` (which runs `rl init` and `rl hf` for what is missing): the only modules
that reach a subcommand, and only through the registry."""
GIVEN_NO_PLAN = ("supervisor", "stall", "eta", "exits", "restarts")
"""The launcher's modules that run an attempt: given what it starts (launch.py makes it from the
plan once per attempt), never the plan."""


def test_every_first_party_package_has_a_floor():
    """A new package (a folder with __init__.py at the top or under environments/) must be
    placed here before its imports can be held."""
    assert set(tree_packages()) == set(PRODUCT_FLOORS) | ENVIRONMENTS


def test_no_import_cycle_anywhere_in_the_tree():
    """No import cycle among the modules of every package in the tree. Lazy imports inside
    functions count too: a cycle through one still ties the modules together."""
    assert cycles(import_graph(tree_packages())) == []


def crossings() -> dict[str, list[str]]:
    """Module -> the first-party modules it imports against the floors."""
    bad: dict[str, list[str]] = {}
    for module, targets in import_graph(tree_packages()).items():
        source = package_of(module)
        for target in targets:
            dest = package_of(target)
            if dest == source or allowed(source, dest):
                continue
            bad.setdefault(module, []).append(target)
    return bad


def allowed(source: str, dest: str) -> bool:
    if dest in ENVIRONMENTS:
        return source in ENVIRONMENTS or source in MAY_IMPORT_ENVIRONMENTS
    if source in ENVIRONMENTS:
        return dest == "rl_files"
    return PRODUCT_FLOORS[dest] < PRODUCT_FLOORS[source] and not (source in ROLES and dest in ROLES)


def test_every_import_goes_down_a_floor():
    """rlcore imports no role, no launcher and no bundled environment (only rl_files); a role
    imports no other role; the environments import nothing of the product."""
    assert crossings() == {}


def test_the_launcher_reads_only_the_roles_light_modules():
    """What the launcher needs from a role is in the foundation, runs as that role's command,
    or is one of the role's light modules: a `config` schema (`trainer/config.py`,
    `trainer/sft/config.py`, ...) and `trainer/speed_policy.py`."""
    reaching = {}
    for module, targets in import_graph().items():
        if package_of(module) == "launcher":
            bad = [
                t
                for t in targets
                if package_of(t) in ROLES and t.rpartition(".")[2] not in LIGHT_ROLE_MODULES
            ]
            if bad:
                reaching[module] = sorted(bad)
    assert reaching == {}


def test_the_subcommands_are_leaves():
    """No module outside launcher/commands imports a subcommand or what the subcommands share
    among themselves: what another part needs of them (run.json's status record, a folder's
    disk use, asking the user) lives in a library module that names what it owns. The CLI front
    reaches the subcommands through their registry alone."""
    reaching = {}
    for module, targets in import_graph(tree_packages()).items():
        if module == COMMANDS or module.startswith(COMMANDS + "."):
            continue
        bad = sorted(
            t
            for t in targets
            if t.startswith(COMMANDS + ".") or (t == COMMANDS and module not in CLI_FRONT)
        )
        if bad:
            reaching[module] = bad
    assert reaching == {}


def test_an_attempt_runs_without_the_plan():
    """The supervisor, the stall watchdog, the run's clock, the exit messages and the restart
    policy import no launcher.plan (nor anything that does): each takes what it needs."""
    graph = import_graph()
    reaching = {}
    for name in GIVEN_NO_PLAN:
        seen, todo = set(), [f"launcher.{name}"]
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo += graph.get(module, ())
        if "launcher.plan" in seen:
            reaching[name] = sorted(m for m in seen if "launcher.plan" in graph.get(m, ()))
    assert reaching == {}


def test_the_roles_light_modules_import_nothing_heavy():
    """`rl --help`, validation and `--dry-run` import the light modules: no torch, vLLM or
    verifiers there, not even inside a function."""
    heavy = {}
    for role in ROLES:
        for path in (REPO / role).rglob("*.py"):
            if path.stem not in LIGHT_ROLE_MODULES:
                continue
            found = sorted(n for n in external_imports(path) if n.split(".")[0] in HEAVY)
            if found:
                heavy[str(path.relative_to(REPO))] = found
    assert heavy == {}


def external_imports(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add(node.module or "")
    return names


def rlcore_part(module: str) -> str:
    """`rlcore.files.paths` -> `rlcore.files`; a top-level module names itself."""
    parts = module.split(".")
    if len(parts) > 2 or (REPO / "rlcore" / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module


def declared_imports() -> dict[str, set[str]]:
    """Each rlcore subpackage -> the rlcore parts its docstring's `Imports:` line names."""
    declared = {}
    for init in sorted((REPO / "rlcore").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        found = re.search(r"^Imports: (.*)\.$", doc, re.M | re.S)
        assert found, f"{init.relative_to(REPO)}: its docstring has no `Imports: ...` line"
        names = {n.strip() for n in found.group(1).replace("\n", " ").split(",")}
        declared[f"rlcore.{init.parent.name}"] = {n for n in names if n.startswith("rlcore")}
    return declared


def test_each_rlcore_subpackage_imports_only_what_its_docstring_names():
    declared = declared_imports()
    undeclared = {}
    for module, targets in import_graph().items():
        if package_of(module) != "rlcore" or module == "rlcore":
            continue
        part = rlcore_part(module)
        if part not in declared:
            continue
        bad = sorted(
            t
            for t in targets
            if package_of(t) == "rlcore"
            and rlcore_part(t) != part
            and rlcore_part(t) not in declared[part]
        )
        if bad:
            undeclared[module] = bad
    assert undeclared == {}


def test_the_declared_layers_have_no_cycle():
    """The `Imports:` lines themselves form floors: no two subpackages may each import the other."""
    declared = declared_imports()
    assert cycles({part: names & set(declared) for part, names in declared.items()}) == []


def test_the_top_level_modules_of_rlcore_import_no_subpackage():
    """errors, faults and secrets are below every subpackage."""
    found = {
        module: sorted(t for t in targets if rlcore_part(t) != t)
        for module, targets in import_graph().items()
        if package_of(module) == "rlcore"
        and module.count(".") == 1
        and rlcore_part(module) == module
    }
    assert {m: t for m, t in found.items() if t} == {}


def test_no_folder_of_the_foundation_holds_more_than_twelve_modules():
    """A folder says what it owns: past a dozen modules it is split by concern. Held for rlcore
    and its subpackages; the role packages (launcher/ 24, trainer/ 22, inference/ 18,
    orchestrator/ 17, launcher/commands/ 13) are not split yet."""
    crowded = {}
    root = REPO / "rlcore"
    for folder in [root, *[p.parent for p in root.rglob("*/__init__.py")]]:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        if len(modules) > 12:
            crowded[str(folder.relative_to(REPO))] = len(modules)
    assert crowded == {}
