"""The package's layering: every import points down the layer list, no import cycle (imports
inside functions count), no private name imported from another module, few top-level modules.

The layers and their order are documented in docs/architecture.md.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "robustscope"

#: Layer rank of each subpackage: a module may import from its own rank or a lower one.
LAYERS = {"core": 0, "models": 1, "threats": 1, "solvers": 2, "search": 3, "scores": 4,
          "report": 5, "runs": 6, "cli": 7}
MAX_TOP_LEVEL_MODULES = 8


def _modules() -> dict[str, Path]:
    mods = {}
    for f in PACKAGE.rglob("*.py"):
        parts = list(f.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> list[tuple[str, str | None]]:
    """(imported module, imported name or None) for every import in ``path``, at any depth."""
    out = []
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_pkg else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                out.append((full if full in MODULES else base, a.name))
    return [(t, n) for t, n in out if t.split(".")[0] == "robustscope"]


EDGES = {m: [(_resolve(t), n) for t, n in _imports(m, f)] for m, f in MODULES.items()}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_subpackage_has_a_layer():
    assert {_layer(m) for m in MODULES if "." in m} <= set(LAYERS)


def test_imports_point_down_the_layers():
    wrong = []
    for m, targets in EDGES.items():
        if m == "robustscope":
            continue  # the package's public API re-exports from every layer
        for t, _ in targets:
            if t == "robustscope":
                wrong.append(f"{m} imports the package root (import from the layer instead)")
            elif t and LAYERS[_layer(t)] > LAYERS[_layer(m)]:
                wrong.append(f"{m} ({_layer(m)}) imports {t} ({_layer(t)})")
    assert not wrong, "\n".join(wrong)


def test_no_private_name_imported_from_another_module():
    wrong = [f"{m} imports {n} from {t}" for m, targets in EDGES.items() for t, n in targets
             if n and n.startswith("_") and not n.startswith("__") and t and t not in m]
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle():
    graph = {m: {t for t, _ in ts if t and t != m} for m, ts in EDGES.items()}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                return path + [m, t]
            if t not in state:
                found = visit(t, path + [m])
                if found:
                    return found
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            cycle = visit(m, [])
            if cycle:
                pytest.fail("import cycle: " + " -> ".join(cycle[cycle.index(cycle[-1]):]))


def test_few_modules_at_the_top_of_the_package():
    top = [m for m, f in MODULES.items() if m.count(".") == 1 and f.name != "__init__.py"]
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
