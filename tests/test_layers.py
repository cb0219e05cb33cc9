"""The layers of docs/architecture.md, checked on the code: imports go one way, never round.

Every ``import`` and ``from ... import`` of a ddpsim module (function-level ones
included, read with ``ast``, nothing executed) must name a module of the same
component or of a lower layer. Components of one layer do not import each other
(the recorder and the simulator are peers). The import graph has no cycle.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ddpsim"

# bottom to top: layer name -> its components, each a list of module prefixes
LAYERS: list[tuple[str, dict[str, list[str]]]] = [
    ("torch's private APIs", {"torchcompat": ["ddpsim.torchcompat"]}),
    ("shared ideas", {"errors": ["ddpsim.errors", "ddpsim.kinds"], "buckets": ["ddpsim.buckets", "ddpsim.bucket_hashmap"],
                      "ranks": ["ddpsim.ranks", "ddpsim.forkserver_exit", "ddpsim.proctree", "ddpsim.mainscript"],
                      "events": ["ddpsim.events", "ddpsim.heartbeat"], "models": ["ddpsim.models"]}),
    # ddpsim/trace/ is the trace family; its export (Chrome/HTA out) reads analyses, so it sits above them
    ("trace format", {"trace": ["ddpsim", "ddpsim.trace"], "samples": ["ddpsim.samples"]}),
    ("analysis", {"analysis": ["ddpsim.analysis"]}),
    ("other formats out", {"export": ["ddpsim.trace.export"]}),
    ("DDP re-implemented", {"minddp": ["ddpsim.minddp"]}),
    ("record and simulate", {"record": ["ddpsim.record"], "sim": ["ddpsim.sim"]}),
    ("learn a workload", {"learn": ["ddpsim.learn"]}),
    ("experiments", {"experiments": ["ddpsim.experiments", "ddpsim.samples.regenerate"]}),
    ("command line", {"cli": ["ddpsim.cli", "ddpsim.__main__", "ddpsim.sim.__main__"]}),
    ("figures", {"viz": ["ddpsim.viz"]}),
    ("front ends", {"app": ["ddpsim.app"], "grade": ["ddpsim.grade"]}),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def place(module: str) -> tuple[int, str]:
    """(layer index, component) of ``module``: the longest prefix that names it."""
    best = None
    for i, (_, components) in enumerate(LAYERS):
        for comp, prefixes in components.items():
            for pre in prefixes:
                if module == pre or (pre != "ddpsim" and module.startswith(pre + ".")):
                    if best is None or len(pre) > best[0]:
                        best = (len(pre), i, comp)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")
    return best[1], best[2]


def imported(module: str, path: Path) -> set[str]:
    """The ddpsim modules ``module`` imports, anywhere in its file."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for name in names:
            if name.split(".")[0] != "ddpsim":
                continue
            if name not in MODULES:
                raise AssertionError(f"{module} imports {name}, which does not exist")
            if name != module:
                out.add(name)
    return out


GRAPH = {m: imported(m, p) for m, p in MODULES.items()}


def test_every_module_is_in_a_layer():
    for m in MODULES:
        place(m)


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import that names a higher layer, or a peer component of the same layer."""
    wrong = []
    for m, targets in sorted(graph.items()):
        layer, comp = place(m)
        for t in sorted(targets):
            t_layer, t_comp = place(t)
            if t_layer > layer or (t_layer == layer and t_comp != comp):
                wrong.append(f"{m} ({LAYERS[layer][0]}: {comp}) imports {t} ({LAYERS[t_layer][0]}: {t_comp})")
    return wrong


def test_imports_go_down_the_layers():
    wrong = violations(GRAPH)
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a list of modules, or None."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state:
                found = visit(t)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_import_cycles():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_upward_and_sideways_imports_are_caught():
    fake = {"ddpsim.sim.model": {"ddpsim.learn.extract"},      # up a layer
            "ddpsim.record.worker": {"ddpsim.sim.api"},        # a peer of the same layer
            "ddpsim.learn.refine": {"ddpsim.sim.api", "ddpsim.trace"}}  # down: fine
    wrong = violations(fake)
    assert len(wrong) == 2
    assert wrong[0].startswith("ddpsim.record.worker") and wrong[1].startswith("ddpsim.sim.model")


def test_function_level_imports_count(tmp_path):
    f = tmp_path / "fake.py"
    f.write_text("import os\n\ndef later():\n    from ddpsim.learn import extract\n    import ddpsim.viz\n")
    assert imported("ddpsim.sim.fake", f) == {"ddpsim.learn.extract", "ddpsim.viz"}
