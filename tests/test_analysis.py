"""Tests of pipeline.index.analysis: the BM25 tokenizer (English identifiers/stemming/stopwords, Japanese via Sudachi)."""

from __future__ import annotations

import pytest

from pipeline.index.analysis import Analyzer, field_text, is_japanese


@pytest.fixture(scope="module")
def analyzer() -> Analyzer:
    return Analyzer()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("read_csv_auto", ["read_csv_auto", "read", "csv", "auto"]),
        ("useState", ["usestate", "use", "state"]),
        ("from_pretrained", ["from_pretrained", "from", "pretrain"]),
        ("HTTPServer", ["httpserver", "http", "server"]),
        ("pd.read_csv", ["pd.read_csv", "pd", "read_csv", "read", "csv"]),
        ("get_the_value", ["get_the_value", "get", "valu"]),  # stopword part dropped, whole kept
        ("The installing of packages is not easy", ["instal", "packag", "easi"]),
        ("Install version 3 in 2024", ["instal", "version", "3", "2024"]),
        ("v1.2.3 and utf8", ["v1.2.3", "v1", "2", "3", "utf8"]),
        ("getV2Data", ["getv2data", "get", "v2", "data"]),
        ("Café naïve", ["cafe", "naiv"]),          # accents folded (Latin only)
        ("", []),
        ("--- ** !!", []),
    ],
)
def test_english_tokens(analyzer: Analyzer, text: str, expected: list[str]) -> None:
    assert analyzer.tokens(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "スプレッド構文でオブジェクトをコピーして state を更新",
            ["スプレッド", "構文", "オブジェクト", "コピー", "state", "更新"],
        ),
        ("useEffect フックを使います。", ["useeffect", "use", "effect", "フック", "使う"]),
        # NFKC: full-width ASCII; Sudachi's normalized form unifies spelling variants (リファレンス -> レファレンス)
        ("ＡＰＩリファレンス", ["api", "レファレンス"]),
        ("これはペンです", ["ペン"]),  # pronoun, particle, auxiliary verb dropped
    ],
)
def test_japanese_tokens(analyzer: Analyzer, text: str, expected: list[str]) -> None:
    assert analyzer.tokens(text) == expected


def test_no_particles(analyzer: Analyzer) -> None:
    toks = analyzer.tokens("スプレッド構文でオブジェクトをコピーして state を更新")
    for particle in ("で", "を", "して", "し", "て", "為る"):
        assert particle not in toks


def test_dakuten_preserved(analyzer: Analyzer) -> None:
    assert analyzer.tokens("ベクトル") == ["ベクトル"]
    assert analyzer.tokens("ヘクトル") != analyzer.tokens("ベクトル")
    assert analyzer.tokens("バス") == ["バス"]
    assert analyzer.tokens("パス") == ["パス"]
    assert analyzer.tokens("ベクトル検索") == ["ベクトル", "検索"]
    # half-width katakana with dakuten normalises to the composed full-width form
    assert analyzer.tokens("ﾍﾞｸﾄﾙ") == ["ベクトル"]


def test_query_and_document_identical(analyzer: Analyzer) -> None:
    doc = "Use `pd.read_csv` to load data. useStateでstateを管理します。"
    assert analyzer.tokens(doc) == Analyzer().tokens(doc)
    # the query shares every term with the document it should find
    query = Analyzer().tokens("read csv useState 管理")
    assert set(query) <= set(analyzer.tokens(doc))


def test_ja_bigrams_option() -> None:
    assert Analyzer(ja_bigrams=True).tokens("検索機能") == ["検索機能", "検索", "索機", "機能"]
    assert Analyzer().tokens("検索機能") == ["検索機能"]


def test_long_japanese_input_is_split_for_sudachi(analyzer: Analyzer) -> None:
    text = "設定ファイルを編集します" * 5000  # 60,000 chars, ~180 KB: above Sudachi's 49 KB limit
    toks = analyzer.tokens(text)
    assert toks.count("設定") == 5000


def test_mixed_order_kept(analyzer: Analyzer) -> None:
    assert analyzer.tokens("React の useState フック") == ["react", "usestate", "use", "state", "フック"]


def test_is_japanese() -> None:
    assert is_japanese("スプレッド構文でオブジェクトをコピー")
    assert is_japanese("useState を使ってステートを管理する")
    assert not is_japanese("Install the package with pip")
    assert not is_japanese("")
    assert not is_japanese("123 !!")


def test_field_text_weighting(analyzer: Analyzer) -> None:
    toks = field_text(
        "Install Guide", ["Setup"], "How to install", "Install Guide > Linux", "Run apt.", analyzer=analyzer
    )
    fields = ["instal", "guid", "setup", "how", "instal", "instal", "guid", "linux"]
    assert toks == fields + fields + ["run", "apt"]


def test_latin_accents_fold_but_japanese_dakuten_stay():
    a = Analyzer()
    assert a.tokens("naïve résumé Ærø Łódź Straße café_au_lait München") == [
        "naiv", "resum", "ærø", "łodz", "straße", "cafe_au_lait", "cafe", "au", "lait", "munchen"]
    assert a.tokens("naive resume") == ["naiv", "resum"]
    assert a.tokens("バスとパス、ガス") == ["バス", "パス", "ガス"]


def test_words_as_written_with_their_terms():
    from pipeline.index.analysis import Analyzer

    a = Analyzer()
    assert a.words("ReactのuseStateフック") == [("React", ["react"]), ("useState", ["usestate", "use", "state"]),
                                              ("フック", ["フック"])]
    assert a.words("京都のズンドコ") == [("京都", ["京都"]), ("ズンドコ", ["ずんどこ"])]
    assert a.words("the naïve café") == [("naïve", ["naiv"]), ("café", ["cafe"])]
    assert [t for _, terms in a.words("Parquetファイルを読む") for t in terms] == a.tokens("Parquetファイルを読む")
    # verbs and adjectives left out on request (missing words name what one looks for, not つける)
    assert a.words("順位をつける速いズンドコ", skip_inflected=True) == [("順位", ["順位"]), ("ズンドコ", ["ずんどこ"])]
    # and adverbs and adverbial nouns written in hiragana: 「予算の話はどうなった」 named どう as missing, 「肩が痛いとき
    # どうする」 とき and どう; a katakana one (ズンドコ, an adverb to Sudachi) and a kanji one (今日) stay
    assert a.words("肩が痛いときどうする", skip_inflected=True) == [("肩", ["肩"])]
    assert a.words("予算の話はどうなった", skip_inflected=True) == [("予算", ["予算"]), ("話", ["話"])]
    assert a.words("もっとゆっくり休む方法", skip_inflected=True) == [("方法", ["方法"])]
    assert a.words("今日のズンドコ", skip_inflected=True) == [("今日", ["今日"]), ("ズンドコ", ["ずんどこ"])]
    assert a.words("どうする") == [("どう", ["どう"])]                # only on request


def test_words_of_a_japanese_run_longer_than_sudachi_takes():
    """A pasted query of 20,000 kana with no punctuation (60,000 bytes) was a SudachiError traceback in `docsvault
    search` and "search: internal error" in MCP: missing words passed the run to Sudachi whole."""
    a = Analyzer()
    words = a.words("日本" * 10_000)
    assert len(words) == 10_000
    assert all(w == ("日本", ["日本"]) for w in words)


def test_each_thread_gets_its_own_sudachi_tokenizer() -> None:
    """One analyzer serves every worker thread of the MCP HTTP server; a Sudachi tokenizer used by two threads at
    once raises "Tokenizer is already in use" (session 41: 3 of 60 searches by 4 HTTP sessions were internal
    errors), so each thread tokenizes with its own."""
    import threading

    a = Analyzer()
    mine = a._tokenizer()
    theirs: list[object] = []
    t = threading.Thread(target=lambda: theirs.extend([a._tokenizer(), a._tokenizer()]))
    t.start()
    t.join()
    assert a._tokenizer() is mine                   # reused within a thread
    assert theirs[0] is theirs[1] and theirs[0] is not mine


def test_japanese_tokens_from_several_threads_at_once() -> None:
    """Four threads analysing Japanese text with one analyzer all get its tokens and no error."""
    import threading

    a = Analyzer()
    text = "カワウソは川に住む哺乳類で、魚や甲殻類を食べる。" * 50
    expected = a.tokens(text)
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def work() -> None:
        for _ in range(20):
            try:
                results.append(a.tokens(text))
            except Exception as exc:     # noqa: BLE001 - collected and asserted below
                errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 80 and all(r == expected for r in results)
