"""The package's layers, read from its source: no import cycle, no import from a higher layer.

geometry < ops < nn < models < data < training | inference | evaluation < commands; the three
peers do not import each other (inference runs without Lightning). The base modules (times,
urls, user_errors, output, provenance, the package itself) may be imported by all and import no layer.
Imports inside functions count: they are how a cycle hides.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "s2forecast"
BASE = 0
RANKS = {"geometry": 1, "ops": 2, "nn": 3, "models": 4, "data": 5, "training": 6, "inference": 6, "evaluation": 6,
         "commands": 7, "cli": 7, "help_cache": 7}  # fmt: skip
PEERS = {"training", "inference", "evaluation"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> str | None:
    """The layer of ``s2forecast.X...``: X, or None for a base module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in RANKS else None


def rank(module: str) -> int:
    return RANKS.get(layer(module), BASE)


def imports(module: str) -> set[str]:
    """The s2forecast modules that ``module`` imports anywhere in its source."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {name for name in found if name.split(".")[0] == "s2forecast" and name in MODULES}


GRAPH = {module: imports(module) for module in MODULES}


def test_the_graph_is_read():
    """The reader finds real edges (the test below cannot pass on an empty graph)."""
    assert "s2forecast.ops.neighborhood" in GRAPH["s2forecast.ops.neighborhood_attention"]
    assert "s2forecast.geometry" in GRAPH["s2forecast.nn.attention"]
    assert len(MODULES) > 60 and sum(map(len, GRAPH.values())) > 150


def test_no_import_from_a_higher_layer_or_a_peer():
    upward = [
        f"{module} ({layer(module) or 'base'}) imports {target} ({layer(target) or 'base'})"
        for module, targets in GRAPH.items()
        for target in targets
        if rank(target) > rank(module)
        or (layer(module) in PEERS and layer(target) in PEERS and layer(target) != layer(module))
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    cycles = [component for component in strongly_connected(GRAPH) if len(component) > 1]
    assert not cycles, "\n".join(" <-> ".join(sorted(component)) for component in cycles)


def test_no_private_name_of_another_module():
    """``from X import _name`` of another module: a helper that should be public or moved."""
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("s2forecast"):
                found += [
                    f"{module}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert not found, "\n".join(found)


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components of ``graph``."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            components.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return components


@pytest.mark.parametrize(
    "graph, cyclic",
    [({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True), ({"a": {"b"}, "b": {"c"}, "c": set()}, False)],
)
def test_the_cycle_finder(graph, cyclic):
    assert any(len(component) > 1 for component in strongly_connected(graph)) == cyclic
