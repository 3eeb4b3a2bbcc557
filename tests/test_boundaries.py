"""The library core never imports the shells' frameworks (dagster, typer/click, mcp)."""

import subprocess
import sys

CORE = [
    "pipeline.config", "pipeline.models", "pipeline.common.errors", "pipeline.ingest.sources", "pipeline.ingest.fetch", "pipeline.ingest.normalize",
    "pipeline.common.frontmatter", "pipeline.ingest.vault", "pipeline.index.graph", "pipeline.index.chunk", "pipeline.index.analysis",
    "pipeline.index.embed", "pipeline.index.bm25", "pipeline.warehouse", "pipeline.search.searcher", "pipeline.evaluate",
    "pipeline.common.artifacts", "pipeline.stages",
]


def test_core_imports_no_shell_framework() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in CORE)
        + "bad = [m for m in ('dagster', 'typer', 'click', 'mcp') if m in sys.modules]\n"
        + "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_search_path_does_not_import_dagster() -> None:
    code = "import sys\nimport pipeline.cli\nprint('dagster' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
