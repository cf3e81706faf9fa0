"""Rules read from the source with `ast`: where `/proc` is read, and where a loop waits on a
clock (a deadline loop written by hand instead of rlcore.processes.poll's)."""

import ast
import functools
from pathlib import Path

PROC_READERS = {
    "rlcore/processes/procs.py": "process facts (psutil, and what it cannot give)",
    "rlcore/host/machine.py": "machine facts: /proc/cpuinfo, the NVIDIA driver's entries",
}
"""The modules that may name /proc, and why."""
POLL_MODULE = "rlcore/processes/poll.py"
"""The one module whose loops may sleep on a clock."""
CHILDREN_MODULE = "rlcore/processes/children.py"
"""The one module that starts processes."""
STARTS = {
    "subprocess": {"Popen", "run", "call", "check_call", "check_output", "getoutput"},
    "os": {"fork", "forkpty", "system", "popen", "spawnv", "spawnl", "posix_spawn", "posix_spawnp"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "multiprocessing": {"Process"},
}
"""module -> its functions that start a process (`os.exec*` replaces this one: not a start)."""
CLOCKS = {"monotonic", "time", "perf_counter", "monotonic_ns", "time_ns"}
SLEEPS = {"sleep", "wait_procs"}


@functools.cache
def parse(source: str) -> ast.Module:
    """The tree of `source`, parsed once for every rule."""
    return ast.parse(source)


def proc_paths(source: str) -> list[int]:
    """Lines of string constants (f-string parts included) that name /proc; docstrings and
    other bare string statements are left out."""
    tree = parse(source)
    bare = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in bare
        and names_proc(node.value)
    )


def names_proc(text: str) -> bool:
    return text == "/proc" or "/proc/" in text


def clock_loops(source: str) -> list[int]:
    """Lines of loops that sleep and, in the same loop, read a clock or a deadline: a hand-made
    deadline-poll loop (nested functions are their own loops)."""
    return sorted(
        node.lineno
        for node in ast.walk(parse(source))
        if isinstance(node, (ast.While, ast.For, ast.AsyncFor))
        and any(is_sleep(n) for n in loop_nodes(node))
        and any(is_clock(n) for n in loop_nodes(node))
    )


def loop_nodes(loop: ast.AST):
    """Every node of `loop`, its condition included, but not those inside a nested function."""
    stack = [loop]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                stack.append(child)


def called_name(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def is_sleep(node: ast.AST) -> bool:
    return called_name(node) in SLEEPS


def is_clock(node: ast.AST) -> bool:
    if called_name(node) in CLOCKS:
        return True
    return isinstance(node, ast.Name) and "deadline" in node.id.lower()


def process_starts(source: str) -> list[int]:
    """Lines that start a process: `module.function(...)` for a function of STARTS, or the
    function called by a name imported from its module."""
    tree = parse(source)
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in STARTS
        for alias in node.names
        if alias.name in STARTS[node.module]
    }
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.attr in STARTS.get(func.value.id, ()):
                lines.append(node.lineno)
        elif isinstance(func, ast.Name) and func.id in imported:
            lines.append(node.lineno)
    return sorted(lines)


def modules(root: Path, packages: dict[str, Path]) -> dict[str, Path]:
    """Repository-relative path -> file, for every module of `packages` (name -> folder it is
    imported from)."""
    return {
        path.relative_to(root).as_posix(): path
        for package, base in packages.items()
        for path in sorted((base / package).rglob("*.py"))
        if "__pycache__" not in path.parts
    }
