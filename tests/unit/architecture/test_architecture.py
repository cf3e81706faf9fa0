"""The floors hold: foundation (rlcore) -> roles (trainer, orchestrator, inference) ->
launcher. Read from the source, lazy imports inside functions included."""

from import_graph import ROLES, cycles, import_graph, package_of, tree_packages


def test_no_import_cycle_among_the_projects_modules():
    assert cycles(import_graph()) == []


def test_no_import_cycle_anywhere_in_the_tree():
    """No import cycle among the modules of every package in the tree: the product's,
    benchmarks/ and each bundled environment (environments/*). Lazy imports inside functions
    count too (they are not excluded): a cycle through one still ties the modules together,
    and it is how benchmarks/vs_trl.py and vs_trl_sweep.py imported each other."""
    packages = tree_packages()
    assert {"rlcore", "launcher", "benchmarks", "rl_envs", "rl_tasks"} <= set(packages)
    assert cycles(import_graph(packages)) == []


def test_the_foundation_imports_nothing_above_it():
    above = {
        module: sorted(t for t in targets if package_of(t) != "rlcore")
        for module, targets in import_graph().items()
        if package_of(module) == "rlcore"
    }
    assert {m: t for m, t in above.items() if t} == {}


def test_roles_import_no_other_role_and_not_the_launcher():
    crossing = {}
    for module, targets in import_graph().items():
        role = package_of(module)
        if role in ROLES:
            bad = [t for t in targets if package_of(t) not in ("rlcore", role)]
            if bad:
                crossing[module] = sorted(bad)
    assert crossing == {}


def test_the_launcher_reads_only_the_roles_config_schemas():
    """What the launcher needs from a role lives in the foundation or runs as a command; the
    role's `config` module (a pydantic schema, no heavy imports) is its one door."""
    reaching = {}
    for module, targets in import_graph().items():
        if package_of(module) == "launcher":
            bad = [t for t in targets if package_of(t) in ROLES and not t.endswith(".config")]
            if bad:
                reaching[module] = sorted(bad)
    assert reaching == {}
