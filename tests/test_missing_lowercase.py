"""An identifier typed in lowercase is in the note that writes it in camelCase (session 44, probing the five docs
corpora): `docsvault search usestate` said `(no note contains 'usestate': these notes are only near in meaning)`
above React's useState page. BM25 keeps `useState` whole and unstemmed (`usestate`) beside its parts, and stems the
typed word to `usest`; the missing-words check now also looks the word up casefolded whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.index.embed import HashEmbedder
from pipeline.models import Chunk, Note
from pipeline.search.searcher import MissingWords, Searcher
from tests.tiny_warehouse import publish_chunks


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lower") / "warehouse.duckdb"
    text = "Call useState to add a state variable; StableDiffusionPipeline loads a model."
    note = Note("g", "hooks.md", "hooks.md", "Hooks", {"title": "Hooks"}, text)
    publish_chunks(path, [note], [Chunk(f"{note.note_id}-0", note.note_id, "g", 0, ("Hooks",), "Hooks", text)])
    return path


@pytest.mark.parametrize(("query", "missing"), [
    ("usestate", ()),                                   # was ('usestate',): stemmed to usest, no such term
    ("USESTATE otter", ("otter",)),
    ("stablediffusionpipeline", ()),
    ("usestat", ("usestat",)),                          # a typo is still named
    ("zorbstate", ("zorbstate",)),
])
def test_a_lowercase_identifier_is_in_its_camelcase_note(warehouse: Path, query: str, missing: tuple[str, ...]) -> None:
    with Searcher(warehouse, embedder_factory=lambda m: HashEmbedder(64)) as s:  # type: ignore[arg-type]
        assert s.missing_words(query).missing == missing
        assert isinstance(s.missing_words(query), MissingWords)
