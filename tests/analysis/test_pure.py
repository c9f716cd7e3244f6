"""analysis/ is pure: neither it nor any project module it reaches imports a terminal, a
command line or plots (rich, typer, plotly), so the Lambda functions that judge a sweep load
none of them. Every import counts, at module level or inside a function."""

import ast

from tests.test_import_graph import graph, modules

VIEWS = {"rich", "typer", "plotly"}


def reached(start: set[str], edges: dict[str, set[str]]) -> set[str]:
    """The project modules `start` imports, directly or not, and `start` itself."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += edges.get(name, set())
    return seen


def libraries(name: str) -> set[str]:
    """The top-level names of everything module `name` imports (project packages included)."""
    tree = ast.parse(modules()[name].read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def views_reached(start: set[str], edges: dict[str, set[str]]) -> dict[str, set[str]]:
    return {
        name: libraries(name) & VIEWS
        for name in sorted(reached(start, edges))
        if libraries(name) & VIEWS
    }


def test_analysis_imports_no_terminal_command_line_or_plots() -> None:
    edges = graph()
    package = {name for name in edges if name == "analysis" or name.startswith("analysis.")}
    assert "analysis.metrics" in package
    assert views_reached(package, edges) == {}


def test_the_check_finds_a_view_reached_through_another_module() -> None:
    edges = {name: set(deps) for name, deps in graph().items()}
    edges["analysis.metrics"].add("rigbench.report.terminal")  # the terminal view: rich
    assert views_reached({"analysis.metrics"}, edges) == {"rigbench.report.terminal": {"rich"}}
