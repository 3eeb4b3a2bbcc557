"""A config file that is an alias bomb (nine nested lists of nine ``*aliases``: 387 million values once expanded) is
one error naming the file and the line, in well under a second; before session 40 `docsvault sources validate` of
such a sources.yaml ran for minutes (1.8 GB at 60 s): PyYAML loads it at once (aliases are shared), whatever walks
it does not. Anchors and merge keys as people use them still load."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.common.errors import EvalFileError, SourceConfigError, SynonymsError
from pipeline.common.yamlload import MAX_EXPANDED, safe_load
from pipeline.evaluate import load_cases
from pipeline.ingest.sources import load_sources
from pipeline.search.synonyms import load_synonyms

BOMB = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['x'] * 9)}]\n"
               for p, c in zip(["", *"abcdefgh"], "abcdefghi"))
PROBLEM = (f"more than {MAX_EXPANDED:,} values once its aliases (*name) are expanded (an alias bomb?); write the "
           "values out or use fewer aliases")


def test_the_bomb_is_refused_at_the_alias_that_passes_the_bound() -> None:
    with pytest.raises(yaml.MarkedYAMLError) as err:
        safe_load(BOMB)
    assert err.value.problem == PROBLEM
    assert err.value.problem_mark.line + 1 == 7          # g: 9**7 = 4.8 million values; f: 9**6 = 531,441


def test_anchors_and_merge_keys_in_normal_use_still_load() -> None:
    text = "base: &base {kind: local, format: obsidian}\nsources:\n  - <<: *base\n    name: a\n  - <<: *base\n    name: b\n"
    assert safe_load(text)["sources"] == [{"kind": "local", "format": "obsidian", "name": "a"},
                                          {"kind": "local", "format": "obsidian", "name": "b"}]
    assert len(safe_load(BOMB.split("g:")[0])["f"]) == 9          # 531,441 values: under the bound


def test_sources_synonyms_and_eval_files_name_the_file_and_line(tmp_path: Path) -> None:
    sources = tmp_path / "sources.yaml"
    sources.write_text(BOMB + "sources:\n  - name: me\n    kind: local\n    path: .\n    include: *i\n")
    with pytest.raises(SourceConfigError) as err:
        load_sources(sources)
    assert str(err.value) == f"{sources}: line 7 is not valid YAML: {PROBLEM}"
    synonyms = tmp_path / "synonyms.yaml"
    synonyms.write_text(BOMB + "groups: [*i]\n")
    with pytest.raises(SynonymsError, match=r"synonyms.yaml.*line 7.*alias bomb"):
        load_synonyms(synonyms, str.split)
    cases = tmp_path / "cases.yaml"
    cases.write_text(BOMB + "corpus: me\ncases: *i\n")
    with pytest.raises(EvalFileError, match=r"cases.yaml.*line 7.*alias bomb"):
        load_cases([cases])
