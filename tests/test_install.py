"""Installing docsvault prints no "does not provide the extra" warning: justext (trafilatura's) asks for
``lxml[html_clean]``, which only a pip that normalizes extra names (PEP 685, pip >= 23.3) matches to lxml's
``html-clean``; `make install` upgrades pip to that first, and pyproject names ``lxml_html_clean`` directly."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _rule(makefile: str, target: str) -> list[str]:
    """The recipe lines of ``target`` in the Makefile."""
    lines = makefile.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    out = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        out.append(line.strip())
    return out


def test_make_install_upgrades_pip_before_installing_anything() -> None:
    recipe = _rule((REPO / "Makefile").read_text(encoding="utf-8"), "$(VENV)/.installed")
    assert recipe[0] == '$(BIN)/python -m pip install --quiet "pip>=23.3"'
    assert [line for line in recipe if "pip install" in line][1:] == [
        "$(BIN)/pip install --quiet torch==2.13.0", "$(BIN)/pip install --quiet -e ."]


def test_lxml_html_clean_is_a_direct_dependency_and_imports() -> None:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    assert "lxml_html_clean" in deps
    assert not [d for d in deps if re.match(r"lxml\s*\[", d)]      # no extra of lxml that some pips cannot match
    from lxml.html.clean import Cleaner  # what justext imports

    assert Cleaner is not None
