"""The architecture holds: the stage order, the shell/core rule and no import cycles, read from the source with
``ast`` (imports inside functions count too; ``if TYPE_CHECKING:`` imports do not, they never run).

Layers, in data-flow order (a module may import its own layer and the ones before it, never a later one):

    foundation (models, config, common/) -> sources -> fetch -> normalize -> vault -> graph/chunk -> embed
    -> warehouse -> search -> eval -> stages -> service -> shells (cli, mcp_server/mcp_http, defs/ + definitions,
    distributed)

The core (every layer but the shells) never imports dagster, typer/click or mcp, nor a shell. The three shells do
not import each other, except the CLI starting the other two (``docsvault mcp`` -> mcp_server/mcp_http,
``docsvault build`` -> defs.runner).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pipeline

PKG = Path(pipeline.__file__).resolve().parent

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("pipeline.models", "pipeline.config", "pipeline.common")),
    ("sources", ("pipeline.ingest.sources",)),
    ("fetch", ("pipeline.ingest.fetch",)),
    ("normalize", ("pipeline.ingest.normalize", "pipeline.ingest.htmlblocks", "pipeline.ingest.attachments")),
    ("vault", ("pipeline.ingest", "pipeline.ingest.vault", "pipeline.ingest.ownership", "pipeline.ingest.vault_check",
               "pipeline.ingest.capture")),
    ("graph/chunk", ("pipeline.index", "pipeline.index.chunk", "pipeline.index.graph", "pipeline.index.vaultlinks",
                     "pipeline.index.language", "pipeline.index.analysis", "pipeline.index.bm25")),
    ("embed", ("pipeline.index.embed", "pipeline.index.onnx_embed", "pipeline.index.embed_child")),
    ("warehouse", ("pipeline.warehouse",)),
    ("search", ("pipeline.search",)),
    ("eval", ("pipeline.evaluate",)),
    ("stages", ("pipeline.stages",)),
    ("service", ("pipeline.service",)),
]
#: shell -> its modules (prefixes)
SHELLS: dict[str, tuple[str, ...]] = {
    "cli": ("pipeline.cli",),
    "mcp": ("pipeline.mcp_server", "pipeline.mcp_http"),
    "dagster": ("pipeline.defs", "pipeline.definitions", "pipeline.distributed"),
}
#: the only imports from one shell into another: the CLI starts the MCP server and the Dagster run
SHELL_LAUNCHERS = {("pipeline.cli", "pipeline.mcp_server"), ("pipeline.cli", "pipeline.mcp_http"),
                   ("pipeline.cli", "pipeline.defs.runner")}
FRAMEWORKS = ("dagster", "dagster_celery", "typer", "click", "mcp")


def _module_of(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_of(p): p for p in PKG.rglob("*.py")}


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Line numbers inside ``if TYPE_CHECKING:`` blocks."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            for sub in node.body:
                out.update(range(sub.lineno, (sub.end_lineno or sub.lineno) + 1))
    return out


def imports_of(module: str) -> Iterator[tuple[str, int]]:
    """``(imported module, line)`` of every runtime import in ``module``: a ``from X import y`` names ``X.y`` when
    that is a module, else ``X``; relative imports are resolved."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in MODULES else target), node.lineno


def _matches(module: str, prefixes: tuple[str, ...]) -> int:
    """Length of the longest prefix of ``prefixes`` that ``module`` is or lies under (0: none)."""
    return max((len(p) for p in prefixes if module == p or module.startswith(p + ".")), default=0)


def layer_of(module: str) -> int | None:
    """Index in LAYERS (the most specific prefix wins; ``pipeline`` itself is foundation); None for a shell."""
    if module == "pipeline":
        return 0
    if shell_of(module):
        return None
    best, where = 0, None
    for i, (_, prefixes) in enumerate(LAYERS):
        n = _matches(module, prefixes)
        if n > best:
            best, where = n, i
    return where


def shell_of(module: str) -> str | None:
    return next((name for name, prefixes in SHELLS.items() if _matches(module, prefixes)), None)


def internal_edges() -> list[tuple[str, str, int]]:
    return [(m, t, line) for m in sorted(MODULES) for t, line in imports_of(m) if t in MODULES and t != m]


def test_every_module_has_a_place() -> None:
    homeless = [m for m in MODULES if layer_of(m) is None and shell_of(m) is None]
    assert homeless == []


def test_stage_order() -> None:
    bad = []
    for m, t, line in internal_edges():
        lm, lt = layer_of(m), layer_of(t)
        if lm is not None and lt is not None and lt > lm:
            bad.append(f"{m}:{line} imports {t} ({LAYERS[lm][0]} may not use the later layer {LAYERS[lt][0]})")
    assert bad == []


def test_core_never_imports_a_shell_or_its_framework() -> None:
    bad = []
    for m in MODULES:
        if shell_of(m):
            continue
        for t, line in imports_of(m):
            if shell_of(t) or t.split(".")[0] in FRAMEWORKS:
                bad.append(f"{m}:{line} imports {t}")
    assert bad == []


def test_shells_do_not_import_each_other() -> None:
    bad = [f"{m}:{line} imports {t}" for m, t, line in internal_edges()
           if shell_of(m) and shell_of(t) and shell_of(m) != shell_of(t) and (m, t) not in SHELL_LAUNCHERS]
    assert bad == []


def test_no_import_cycles() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m, t, _ in internal_edges():
        graph[m].add(t)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:     # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []


def test_the_checker_sees_imports_inside_functions() -> None:
    inside = [(t, line) for t, line in imports_of("pipeline.mcp_server") if t == "pipeline.service"]
    assert inside and all(line > 1 for _, line in inside)
    assert layer_of("pipeline.ingest.fetch.base") == 2 and layer_of("pipeline.index.embed") == 6
    assert shell_of("pipeline.defs.runner") == "dagster" and layer_of("pipeline.defs.runner") is None


def test_config_is_the_only_reader_of_the_environment() -> None:
    """In the core and in the shells: every variable docsvault reads or sets goes through ``pipeline.config``."""
    bad = []
    for m, path in sorted(MODULES.items()):
        if m == "pipeline.config":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb") and \
                    getattr(node.value, "id", "") == "os":
                bad.append(f"{m}:{node.lineno} os.{node.attr}")
    assert bad == []


def test_stage_code_files_exist() -> None:
    """Every file a stage's code version hashes (``stages.base._CODE``) exists: a moved file would otherwise be
    hashed as ``missing`` and the stage's cache would never notice a change of its code."""
    from pipeline.stages.base import _CODE, _PKG

    assert _PKG == PKG
    missing = sorted({rel for rels in _CODE.values() for rel in rels if not (PKG / rel).is_file()})
    assert missing == []


def test_the_vault_code_version_covers_the_code_the_vault_step_runs(tmp_path, monkeypatch) -> None:
    """``code_version("vault")`` hashes every module whose code shapes what the vault step writes and reports:
    the stage (stages/ingest.py), the resolver it qualifies links with (index/graph.py), the prose link scan
    (normalize, markdown), … (graph.py and the stage were left out: a change there kept the last vault)."""
    import shutil

    from pipeline.stages import base

    assert set(base._CODE["vault"]) == {
        "stages/ingest.py", "ingest/vault.py", "common/frontmatter.py", "ingest/ownership.py",
        "ingest/attachments.py", "index/vaultlinks.py", "index/graph.py", "ingest/normalize.py",
        "common/markdown.py", "models.py", "ingest/fetch/local.py"}
    for rel in base._CODE["vault"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PKG / rel, tmp_path / rel)
    monkeypatch.setattr(base, "_PKG", tmp_path)
    before = base.code_version.__wrapped__("vault")
    for rel in ("index/graph.py", "stages/ingest.py"):
        with (tmp_path / rel).open("a", encoding="utf-8") as f:
            f.write("# changed\n")
        assert base.code_version.__wrapped__("vault") != before, rel
        before = base.code_version.__wrapped__("vault")

def test_core_imports_no_shell_framework_at_runtime() -> None:
    core = [m for m in sorted(MODULES) if not shell_of(m)]
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in core)
        + "bad = [m for m in ('dagster', 'typer', 'click', 'mcp') if m in sys.modules]\n"
        + "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_search_path_does_not_import_dagster() -> None:
    code = "import sys\nimport pipeline.cli\nprint('dagster' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_wheel_includes_every_package() -> None:
    """pyproject's ``[tool.setuptools.packages.find] include = ["pipeline*"]`` finds every folder of modules."""
    import tomllib

    from setuptools import find_packages

    include = tomllib.loads((PKG.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    found = set(find_packages(str(PKG.parent), include=include["include"]))
    folders = {_module_of(p / "__init__.py") for p in PKG.rglob("*") if p.is_dir() and any(p.glob("*.py"))}
    assert folders <= found


#: long functions in files other changes own at the time of writing (give each a ``Long:`` reason or split it)
LONG_EXEMPT: dict[str, set[str]] = {}
MAX_FUNCTION_LINES = 60


def test_long_functions_say_why() -> None:
    """A function of more than MAX_FUNCTION_LINES lines of code (its docstring not counted) states why it is one
    function with a ``Long:`` paragraph in its docstring."""
    bad = []
    for m, path in sorted(MODULES.items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node, clean=False) or ""
            first = node.body[0]
            doc_lines = first.end_lineno - first.lineno + 1 if doc else 0   # type: ignore[operator]
            code = (node.end_lineno or node.lineno) - node.lineno + 1 - doc_lines
            if code > MAX_FUNCTION_LINES and "Long:" not in doc and node.name not in LONG_EXEMPT.get(m, ()):
                bad.append(f"{m}:{node.lineno} {node.name} ({code} lines)")
    assert bad == []


def test_readme_architecture_names_every_module() -> None:
    """The README's architecture table (Development) names every module of ``pipeline/`` (``llms_txt`` may read
    ``llms.txt``), so it keeps matching the tree."""
    readme = (PKG.parent / "README.md").read_text(encoding="utf-8")
    start = readme.index("- Architecture.")
    table = readme[start:readme.index("`tests/test_boundaries.py` reads every import", start)]
    unnamed = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
                     if p.stem != "__init__" and p.stem not in table and p.stem.replace("_", ".") not in table)
    assert unnamed == []
