"""bench/cv.py arithmetic (folds, per-fold choice, out-of-fold figures, paired bootstrap) on synthetic per-case
reciprocal ranks with hand-computed values, bench/_evalkit.py grids, and one end-to-end run on a tiny warehouse."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.test_eval_unscoped import CASES, _publish

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


cv = _load("cv")
kit = sys.modules["_evalkit"]          # imported by cv.py from bench/


# ---------------------------------------------------------------------------------------------------------------
# folds


def test_folds_are_stratified_balanced_and_deterministic() -> None:
    ids = [f"case-{i}" for i in range(10)]
    strata = ["A"] * 5 + ["B"] * 3 + ["C"] * 2
    folds = cv.assign_folds(ids, strata, k=5, seed=0)
    # strata in sorted order, dealt round-robin across them: A fills folds 0-4, B gets 0-2, C gets 3-4
    assert sorted(folds[:5].tolist()) == [0, 1, 2, 3, 4]
    assert sorted(folds[5:8].tolist()) == [0, 1, 2]
    assert sorted(folds[8:].tolist()) == [3, 4]
    assert np.bincount(folds, minlength=5).tolist() == [2, 2, 2, 2, 2]
    # the same fold per case whatever the input order; the same again for the same seed
    order = [7, 2, 9, 0, 5, 1, 8, 3, 6, 4]
    again = cv.assign_folds([ids[i] for i in order], [strata[i] for i in order], k=5, seed=0)
    assert {ids[i]: int(f) for i, f in zip(order, again)} == {i: int(f) for i, f in zip(ids, folds)}
    assert cv.assign_folds(ids, strata, k=5, seed=0).tolist() == folds.tolist()
    # a stratum of one case goes where the deal is: strata ("x", "k0") < ("x", "k1") < ... are folds 0, 1, 2, ...
    single = cv.assign_folds([f"c{i}" for i in range(7)], [("x", f"k{i}") for i in range(7)], k=5)
    assert single.tolist() == [0, 1, 2, 3, 4, 0, 1]
    with pytest.raises(ValueError, match="k must be at least 2"):
        cv.assign_folds(ids, strata, k=1)


# ---------------------------------------------------------------------------------------------------------------
# choice and out-of-fold figures

#: 10 cases, folds 0..4 twice (cases i and i + 5 share fold i). The default is 0.5 everywhere; s1 is perfect on
#: folds 0 and 1, s2 on folds 2, 3 and 4.
RR = np.array([
    [0.5] * 10,
    [1, 1, 0, 0, 0, 1, 1, 0, 0, 0],
    [0, 0, 1, 1, 1, 0, 0, 1, 1, 1],
], dtype=float)
FOLDS = np.array([0, 1, 2, 3, 4, 0, 1, 2, 3, 4])


def test_choice_per_fold_and_out_of_fold_values() -> None:
    # held fold 0 or 1: training means s0 0.5, s1 2/8, s2 6/8 -> s2; folds 2-4: 0.5 / 4/8 / 4/8, a tie -> default
    chosen = cv.choose_per_fold(RR, FOLDS, 5)
    assert chosen.tolist() == [2, 2, 0, 0, 0]
    oof = cv.out_of_fold(RR, FOLDS, chosen)
    assert oof.tolist() == [0, 0, 0.5, 0.5, 0.5, 0, 0, 0.5, 0.5, 0.5]
    assert oof.mean() == pytest.approx(0.3)           # in-sample the best setting (s2) scores 0.6


def test_clear_rule_changes_the_default_only_for_a_clear_gain() -> None:
    # 20 cases, fold i % 5. s1 gains +0.1 on every case (its interval is the point +0.1: clear); s2 has the best
    # mean (13 cases at 1, 7 at 0: +0.15) but gains +0.5 or loses -0.5 case by case, so its interval spans zero
    default = np.full(20, 0.5)
    s1 = np.full(20, 0.6)
    s2 = np.array([1.0] * 13 + [0.0] * 7)
    folds = np.arange(20) % 5
    select = np.vstack([default, s1, s2])
    assert cv.choose_per_fold(select, folds, 5).tolist() == [2, 2, 2, 2, 2]
    assert cv.choose_per_fold(select, folds, 5, rule="clear").tolist() == [1, 1, 1, 1, 1]
    # without s1 nothing is clear: every fold keeps the default
    assert cv.choose_per_fold(np.vstack([default, s2]), folds, 5, rule="clear").tolist() == [0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="unknown selection rule 'worst'"):
        cv.choose_per_fold(select, folds, 5, rule="worst")


def test_cross_validate_report() -> None:
    # one case per (corpus, kind) stratum: the deal puts case i in fold i % 5, as FOLDS
    ids = [f"c{i}" for i in range(10)]
    corpora = ["x"] * 5 + ["y"] * 5
    kinds = [f"k{i}" for i in range(10)]
    arrays = {"mrr@10": RR, "hit@1": (RR == 1).astype(float), "hit@3": (RR >= 1 / 3).astype(float)}
    res = cv.cross_validate(["default", "s1", "s2"], ids, corpora, kinds, arrays, k=5, seed=0, resamples=1000)
    assert [(f["fold"], f["n"], f["chosen"], f["train"], f["held"]) for f in res["folds"]] == [
        (1, 2, "s2", 0.75, 0.0), (2, 2, "s2", 0.75, 0.0), (3, 2, "default", 0.5, 0.5),
        (4, 2, "default", 0.5, 0.5), (5, 2, "default", 0.5, 0.5)]
    assert res["out_of_fold"]["overall"] == {"n": 10, "mrr@10": 0.3, "hit@1": 0.0, "hit@3": 0.6}
    assert res["out_of_fold"]["by_corpus"] == {"x": {"n": 5, "mrr@10": 0.3, "hit@1": 0.0, "hit@3": 0.6},
                                               "y": {"n": 5, "mrr@10": 0.3, "hit@1": 0.0, "hit@3": 0.6}}
    assert res["out_of_fold"]["by_kind"]["k0"] == {"n": 1, "mrr@10": 0.0, "hit@1": 0.0, "hit@3": 0.0}
    assert {n: r["overall"]["mrr@10"] for n, r in res["in_sample"].items()} == {"default": 0.5, "s1": 0.4, "s2": 0.6}
    assert res["in_sample"]["s2"]["overall"] == {"n": 10, "mrr@10": 0.6, "hit@1": 0.6, "hit@3": 0.6}
    assert [res["delta"][n]["overall"]["diff"] for n in ("s1", "s2")] == [-0.1, 0.1]
    assert res["out_of_fold_delta"]["overall"]["diff"] == -0.2
    # one case per kind: its interval is the point itself
    assert res["delta"]["s1"]["by_kind"]["k0"] == {"diff": 0.5, "lo": 0.5, "hi": 0.5}
    assert res["delta"]["s2"]["by_kind"]["k0"] == {"diff": -0.5, "lo": -0.5, "hi": -0.5}
    assert set(res["delta"]["s1"]["by_corpus"]) == {"x", "y"}
    assert res["chosen_on"] == "mrr@10" and res["settings"] == ["default", "s1", "s2"]
    text = cv.format_cv(res, "scoped")
    assert text.splitlines()[1] == ("folds: 1 (n=2) s2 0.750->0.000; 2 (n=2) s2 0.750->0.000; "
                                    "3 (n=2) default 0.500->0.500; 4 (n=2) default 0.500->0.500; "
                                    "5 (n=2) default 0.500->0.500")
    assert text.splitlines()[3:8] == [
        f"{'':<32}  mrr@10   hit@1   hit@3      Δmrr@10 vs default [95% CI]",
        f"{'out-of-fold (chosen per fold)':<32}   0.300   0.000   0.600          -0.200 [-0.350, -0.050]",
        f"{'in-sample: default':<32}   0.500   0.000   1.000",
        f"{'in-sample: s1':<32}   0.400   0.400   0.400          -0.100 [-0.400, +0.200]",
        f"{'in-sample: s2':<32}   0.600   0.600   0.600          +0.100 [-0.200, +0.400]",
    ]


def test_a_chooser_array_overrides_the_selection() -> None:
    ids, corpora, kinds = [f"c{i}" for i in range(10)], ["x"] * 10, [f"k{i}" for i in range(10)]
    arrays = {"mrr@10": RR, "hit@1": RR, "hit@3": RR}
    chooser = RR[[0, 2, 1]]           # s1 and s2 swapped: folds 0 and 1 now choose s1, perfect there
    res = cv.cross_validate(["default", "s1", "s2"], ids, corpora, kinds, arrays, resamples=100,
                            chooser=chooser, chosen_on="joint")
    assert [f["chosen"] for f in res["folds"]] == ["s1", "s1", "default", "default", "default"]
    assert res["out_of_fold"]["overall"]["mrr@10"] == 0.7        # 4 x 1 + 6 x 0.5
    assert res["chosen_on"] == "joint"


# ---------------------------------------------------------------------------------------------------------------
# bootstrap


def test_bootstrap_intervals() -> None:
    same = cv.paired_bootstrap(np.zeros(50))                      # identical settings
    assert tuple(map(float, same)) == (0.0, 0.0, 0.0)
    const = cv.paired_bootstrap(np.full(7, 0.25))
    assert tuple(map(float, const)) == (0.25, 0.25, 0.25)
    # two cases, differences 1 and 0: a resample's mean is 0, 0.5 or 1 with chances 1/4, 1/2, 1/4
    mean, lo, hi = cv.paired_bootstrap(np.array([1.0, 0.0]))
    assert (float(mean), float(lo), float(hi)) == (0.5, 0.0, 1.0)
    # several rows share the resamples: a row twice another has an interval twice as wide, exactly
    rng = np.random.default_rng(3)
    d = rng.integers(-2, 3, size=40) / 4
    mean, lo, hi = cv.paired_bootstrap(np.vstack([d, 2 * d, np.zeros(40)]), resamples=10_000, seed=0)
    assert lo[1] == 2 * lo[0] and hi[1] == 2 * hi[0] and (lo[2], hi[2]) == (0.0, 0.0)
    assert mean.tolist() == [d.mean(), 2 * d.mean(), 0.0]
    # the counting shortcut equals the textbook resampling with the same draws
    idx = np.random.default_rng(0).integers(0, 40, size=(10_000, 40))
    expected = np.percentile(d[idx].mean(axis=1), [2.5, 97.5])
    assert (lo[0], hi[0]) == pytest.approx(tuple(expected), abs=1e-12)
    again = cv.paired_bootstrap(d)
    assert (float(again[1]), float(again[2])) == (lo[0], hi[0])
    assert all(np.isnan(v) for v in cv.paired_bootstrap(np.zeros(0)))


# ---------------------------------------------------------------------------------------------------------------
# grids


def test_grid_forms_and_files(tmp_path: Path) -> None:
    assert kit.label_of({}) == "default"
    assert kit.label_of({"k_rrf": 20.0, "weights": {"bm25_page": 0.25}, "lanes": ("bm25", "vector")}) == (
        "k_rrf=20, weights.bm25_page=0.25, lanes=bm25+vector")
    assert kit.product_grid(k_rrf=[20.0, 60.0], chunks_per_page=[1]) == [
        ("k_rrf=20, chunks_per_page=1", {"k_rrf": 20.0, "chunks_per_page": 1}),
        ("k_rrf=60, chunks_per_page=1", {"k_rrf": 60.0, "chunks_per_page": 1})]
    as_json = tmp_path / "g.json"
    as_json.write_text(json.dumps({
        "pairs": [["only bm25", {"lanes": ["bm25"]}]],
        "dicts": [{"k_rrf": 30.0}],
        "mapping": {"pv": {"page_vector_weight": 0.5}},
    }), encoding="utf-8")
    grids = kit.load_grid_file(as_json)
    assert grids == {"pairs": [("only bm25", {"lanes": ("bm25",)})], "dicts": [("k_rrf=30", {"k_rrf": 30.0})],
                     "mapping": [("pv", {"page_vector_weight": 0.5})]}
    as_py = tmp_path / "g.py"
    as_py.write_text("from _evalkit import product_grid\nGRIDS = {'x': product_grid(k_rrf=[10.0])}\n",
                     encoding="utf-8")
    assert kit.load_grid_file(as_py) == {"x": [("k_rrf=10", {"k_rrf": 10.0})]}
    (tmp_path / "none.py").write_text("X = 1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="define GRIDS"):
        kit.load_grid_file(tmp_path / "none.py")
    with pytest.raises(ValueError, match="grid 'bad'"):
        kit.normalize_grid([1], "grid 'bad'")
    # the default first; a repeat under the same label once; one label for two settings is an error
    assert kit.settings_list({"a": [("k", {"k_rrf": 1.0})], "b": [("k", {"k_rrf": 1.0}), ("default", {})]},
                             ["a", "b"]) == [("default", {}), ("k", {"k_rrf": 1.0})]
    with pytest.raises(ValueError, match="names two different settings"):
        kit.settings_list({"a": [("k", {"k_rrf": 1.0})], "b": [("k", {"k_rrf": 2.0})]}, ["a", "b"])
    with pytest.raises(ValueError, match="unknown grid 'c'"):
        kit.settings_list({"a": []}, ["c"])


# ---------------------------------------------------------------------------------------------------------------
# end to end on the two-source warehouse of test_eval_unscoped


def test_cv_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _publish(data / "warehouse.duckdb")
    (tmp_path / "alpha.yaml").write_text(CASES, encoding="utf-8")
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"g": {"bm25 only": {"lanes": ["bm25"]}, "k 10": {"k_rrf": 10.0},
                                      "graph seeds": {"graph_seeds": 3}}}), encoding="utf-8")
    saved = tmp_path / "cases.json"
    cv.main(["--data", str(data), "--evals", str(tmp_path / "alpha.yaml"), "--grid-file", str(grid), "--both",
             "--k", "2", "--resamples", "200", "--save-cases", str(saved), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["settings"] == {"default": {}, "bm25 only": {"lanes": ["bm25"]}, "k 10": {"k_rrf": 10.0},
                               "graph seeds": {"graph_seeds": 3}}
    assert out["scoped"]["in_sample"]["default"]["overall"] == {"n": 2, "mrr@10": 1.0, "hit@1": 1.0, "hit@3": 1.0}
    assert out["unscoped"]["in_sample"]["default"]["overall"] == {"n": 2, "mrr@10": 0.75, "hit@1": 0.5,
                                                                   "hit@3": 1.0}
    assert out["unscoped"]["chosen_on"] == "mrr@10 (mean of scoped and unscoped)"
    per_case = json.loads(saved.read_text(encoding="utf-8"))
    assert per_case["cases"] == [{"id": "a1", "corpus": "alpha", "kind": "paraphrase"},
                                 {"id": "a2", "corpus": "alpha", "kind": "keyword"}]
    assert per_case["scopes"]["unscoped"]["mrr@10"][0] == [0.5, 1.0]
    # re-analysed from the saved figures: the same result, no search
    cv.main(["--load-cases", str(saved), "--both", "--k", "2", "--resamples", "200", "--json"])
    assert json.loads(capsys.readouterr().out) == out
    # a key that is neither a Searcher parameter, lanes nor an attribute: named, with what is allowed
    grid.write_text(json.dumps({"g": [{"no_such_knob": 1}]}), encoding="utf-8")
    with pytest.raises(SystemExit, match="error: setting 'no_such_knob=1': 'no_such_knob' is neither a Searcher "
                                         "parameter"):
        cv.main(["--data", str(data), "--evals", str(tmp_path / "alpha.yaml"), "--grid-file", str(grid)])
