"""The import graph of the project's packages points one way: down the layers in `LAYERS`,
never up, and has no cycle. Every import counts, at module level or inside a function,
typing-only or not."""

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rigbench", "functions", "analysis", "harness", "rigs", "hardware")
# Top to bottom; a module may import its own layer and those below. A module belongs to the
# layer of the longest prefix naming it ("rigbench" alone: the package and any module not
# placed yet, at the bottom of rigbench, so a new module that imports upward fails here).
LAYERS: tuple[tuple[str, ...], ...] = (
    # the command line, assembling every command
    ("rigbench.__main__", "rigbench.cli"),
    # the cloud commands, the bake and the MCP server
    ("rigbench.cloud", "rigbench.bake", "rigbench.mcp"),
    # local mode's commands, the report commands, and which stack a command opens
    ("rigbench.commands",),
    # the views: report pages and the comparison every view shows, then the progress tables
    ("rigbench.report",),
    ("rigbench.progress",),
    # the stack client
    ("rigbench.stack",),
    # the emulation, local mode's infrastructure, what a stack is deployed from
    ("rigbench.emulation", "rigbench.local", "rigbench.bake_emulation", "rigbench.bundle",
     "rigbench.lambda_package", "rigbench.stack_refs"),
    # the Lambda handlers
    ("functions",),
    # the cross-boot analysis: each boot's values in, comparisons and verdicts out
    ("analysis",),
    # the harness and the rigs
    ("harness", "rigs", "rigbench"),
    # the machines
    ("hardware",),
)  # fmt: skip


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found[module_name(path)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports (a `from pkg import mod` counts as pkg.mod)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [f"{prefix}.{alias.name}" for alias in node.names] + [prefix]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


@cache
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, set(known)) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycle() -> None:
    assert cycles(graph()) == []


def test_the_check_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]


def layer_of(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> int:
    best, found = "", -1
    for depth, prefixes in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, found = prefix, depth
    if found < 0:
        raise AssertionError(f"{module} is in no layer")
    return found


def upward(
    edges: dict[str, set[str]], layers: tuple[tuple[str, ...], ...] = LAYERS
) -> set[tuple[str, str]]:
    """Imports from a module to one in a higher layer."""
    return {
        (name, dep)
        for name, deps in edges.items()
        for dep in deps
        if layer_of(dep, layers) < layer_of(name, layers)
    }


def test_imports_point_down_the_layers() -> None:
    assert upward(graph()) == set()


def test_the_check_finds_an_upward_import() -> None:
    layers = (("app.cli",), ("app.stack",), ("app",))
    edges = {"app.cli": {"app.stack"}, "app.stack": {"app.util"}, "app.util": set()}
    assert upward(edges, layers) == set()
    edges["app.util"] = {"app.cli"}  # the bottom reaching the top
    edges["app.stack.local"] = {"app.cli.local"}
    assert upward(edges, layers) == {("app.util", "app.cli"), ("app.stack.local", "app.cli.local")}


def test_the_real_graph_fails_with_one_upward_import_added() -> None:
    edges = {name: set(deps) for name, deps in graph().items()}
    edges["rigbench.stack.local"].add("rigbench.commands.local")
    edges["hardware.instance_types"].add("rigs.kernels")
    assert upward(edges) == {
        ("rigbench.stack.local", "rigbench.commands.local"),
        ("hardware.instance_types", "rigs.kernels"),
    }


def folders_of(edges: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The imports between the modules and subpackages directly inside `package`
    (rigbench.commands.local -> rigbench.stack.boto: rigbench.commands -> rigbench.stack)."""
    depth = package.count(".") + 2

    def folder(module: str) -> str:
        return ".".join(module.split(".")[:depth])

    found: dict[str, set[str]] = {}
    for name, deps in edges.items():
        if name.startswith(package + "."):
            for dep in deps:
                if dep.startswith(package + ".") and folder(dep) != folder(name):
                    found.setdefault(folder(name), set()).add(folder(dep))
    return found


def test_rigbench_s_folders_import_one_way() -> None:
    # 0 upward arrows inside rigbench/: no two of its modules or folders import each other,
    # however indirectly (as cloud.py and commands/ did)
    assert cycles(folders_of(graph(), "rigbench")) == []


def test_the_folder_check_finds_two_folders_importing_each_other() -> None:
    edges = {name: set(deps) for name, deps in graph().items()}
    edges["rigbench.progress"].add("rigbench.report.data")  # the pages import the tables
    assert cycles(folders_of(edges, "rigbench")) == [["rigbench.progress", "rigbench.report"]]
