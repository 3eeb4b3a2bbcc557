"""k-fold cross-validation of ranking settings on a built warehouse, and paired bootstrap intervals against the
default: does a setting (or the procedure "pick the best setting") still win on cases it was not chosen on?

    python bench/cv.py --data /tmp/bench-data                          # GRIDS below, ../shared/evals, scoped
    python bench/cv.py --data data --evals evals/ --grid k --both      # one grid, scoped and unscoped
    python bench/cv.py --data data --grid-file my_grids.py --unscoped  # grids of a file (Python or JSON)
    python bench/cv.py --load-cases runs.json --k 10                   # re-analyse saved per-case figures

How: every setting (``default`` = ``{}`` first, then the settings of the chosen grids) searches every case ONCE
per scope (query vectors embedded once for all settings); its per-case MRR@10 / hit@1 / hit@3 / nDCG@10 are kept.
The rest is arithmetic on those arrays (numpy, a second or so):

- folds: ``--k`` (5) folds stratified by corpus x kind: within each stratum the cases are ordered by a hash of
  ``seed`` and their id and dealt round-robin, continuing across strata, so every stratum is spread evenly, the
  folds differ in size by at most one, and a case keeps its fold whatever the order of the eval files.
- out-of-fold: for each fold, the setting with the best mean MRR@10 on the other k-1 folds (a tie keeps the earlier
  setting, so the default wins ties) is scored on the held fold; the held folds pooled give the out-of-fold figures
  (overall, per kind, per corpus), beside the in-sample figures of every setting.
- bootstrap: a paired bootstrap (``--resamples`` 10,000 resamples of the cases with replacement, seeded) of each
  setting's per-case MRR@10 minus the default's; the 2.5th and 97.5th percentiles of the resampled mean difference
  are the 95% interval, pooled and per kind. The same for the out-of-fold ranking minus the default: the evidence a
  change of default needs (interval above zero), or a principled change needs (interval around zero).

Grids: ``GRIDS`` below (edit it, or import more), or ``--grid-file FILE``: a Python file defining
``GRIDS = {name: [(label, {searcher overrides}), ...]}`` (it may ``from _evalkit import product_grid,
FUSION_GRIDS``) or a JSON object of the same shape; a grid may also be a list of override dicts (labelled
automatically) or a mapping label -> overrides. Overrides: any ``Searcher`` constructor parameter (``k_rrf``,
``weights`` (merged into the defaults), ``page_vector_weight``, ...), ``lanes``, or any Searcher attribute (set
before the first query). See ``bench/_evalkit.py``. Not part of ``make test``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _evalkit import (
    FUSION_GRIDS,
    METRIC_KEYS,
    SHARED,
    Grid,
    cached_embedder_factory,
    evaluate_setting,
    load_grid_file,
    per_case_arrays,
    product_grid,
    settings_list,
)

#: Grids to cross-validate, by name; ``--grid NAME ...`` picks some (default: all). Add grids here or pass a file.
GRIDS: dict[str, Grid] = {
    **FUSION_GRIDS,                              # page_vector, page_lane, k, lanes (one setting changed at a time)
    "k_x_page_vector": product_grid(k_rrf=[20.0, 60.0], page_vector_weight=[0.5, 1.0, 1.5]),
}

REPORTED: tuple[str, ...] = ("mrr@10", "hit@1", "hit@3")
TIE = 1e-12                                      # means closer than this are a tie (float summation noise)


# ---------------------------------------------------------------------------------------------------------------
# arithmetic (pure; tests/test_cv.py)


def _order_key(seed: int, case_id: str) -> str:
    return hashlib.sha256(f"{seed}\0{case_id}".encode()).hexdigest()


def assign_folds(ids: Sequence[str], strata: Sequence[Hashable], k: int = 5, seed: int = 0) -> np.ndarray:
    """Fold (0..k-1) of every case, stratified by ``strata`` (e.g. ``(corpus, kind)`` per case).

    Strata are taken in sorted order; within a stratum the cases are ordered by ``sha256(f"{seed}\\0{id}")`` and
    dealt round-robin, the deal continuing across strata. So each stratum's counts per fold differ by at most one,
    the folds' sizes too, and the result depends only on the ids, their strata, ``k`` and ``seed`` (not on order).

    Returns:
        ``(len(ids),)`` int64 array.

    Raises:
        ValueError: ``k < 2`` or ``ids`` and ``strata`` differ in length.
    """
    if k < 2:
        raise ValueError(f"k must be at least 2, got {k}")
    if len(ids) != len(strata):
        raise ValueError(f"{len(ids)} ids but {len(strata)} strata")
    groups: dict[Hashable, list[int]] = {}
    for i, stratum in enumerate(strata):
        groups.setdefault(stratum, []).append(i)
    folds = np.empty(len(ids), dtype=np.int64)
    dealt = 0
    for stratum in sorted(groups, key=repr):
        members = sorted(groups[stratum], key=lambda i: (_order_key(seed, str(ids[i])), str(ids[i])))
        for j, i in enumerate(members):
            folds[i] = (dealt + j) % k
        dealt += len(members)
    return folds


def choose_per_fold(select: np.ndarray, folds: np.ndarray, k: int, rule: str = "best",
                    resamples: int = 2_000, seed: int = 0) -> np.ndarray:
    """For each fold f, the index of the setting (row of ``select``) chosen on the cases not in f; row 0 is the
    default. A fold with no training case chooses 0.

    Rules:
        ``"best"``: the best mean over the training cases; ties (within 1e-12) go to the lowest index.
        ``"clear"``: the project's rule for changing a default ("keep a change only when its gain is clear"): the
        best mean among the settings whose paired bootstrap 95% interval against the default (``resamples``
        resamples of the training cases, ``seed``) lies above zero; the default when none does.

    Args:
        select: ``(settings, cases)`` per-case values of the selection metric (e.g. reciprocal ranks).
        folds: ``(cases,)`` fold of each case.

    Returns:
        ``(k,)`` int64 array of setting indices.

    Raises:
        ValueError: unknown ``rule``.
    """
    if rule not in ("best", "clear"):
        raise ValueError(f"unknown selection rule {rule!r} (best, clear)")
    chosen = np.zeros(k, dtype=np.int64)
    for f in range(k):
        train = folds != f
        if not train.any():
            continue
        means = select[:, train].mean(axis=1)
        if rule == "clear" and select.shape[0] > 1:
            _, lo, _ = paired_bootstrap(select[1:, train] - select[0, train], resamples, seed)
            means = np.where(np.concatenate([[True], lo > 0]), means, -np.inf)
        chosen[f] = int(np.flatnonzero(means >= means.max() - TIE)[0])
    return chosen


def out_of_fold(values: np.ndarray, folds: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """Per-case values of the setting chosen for each case's fold: ``values[chosen[folds[i]], i]``, ``(cases,)``."""
    return values[chosen[folds], np.arange(values.shape[1])]


def paired_bootstrap(diff: np.ndarray, resamples: int = 10_000, seed: int = 0, level: float = 0.95
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean of paired per-case differences, for several rows at once.

    All rows share the same resamples (``numpy.random.default_rng(seed)``: ``resamples`` draws of n case indices
    with replacement), so rows compare with each other too.

    Args:
        diff: ``(rows, cases)`` per-case differences (e.g. a setting's reciprocal rank minus the default's), or
            ``(cases,)`` for one row.

    Returns:
        ``(mean, lo, hi)``, each ``(rows,)`` (or scalars' arrays of shape () for a 1-D ``diff``): the observed mean
        difference and the ``(1 - level) / 2`` and ``(1 + level) / 2`` percentiles (linear interpolation) of the
        resampled means. NaN when there is no case.
    """
    diff = np.asarray(diff, dtype=np.float64)
    one = diff.ndim == 1
    d = diff[None, :] if one else diff
    rows, n = d.shape
    if n == 0:
        nan = np.full(rows, np.nan)
        return (nan[0], nan[0], nan[0]) if one else (nan, nan.copy(), nan.copy())
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    counts = np.bincount((idx + n * np.arange(resamples)[:, None]).ravel(), minlength=resamples * n)
    means = counts.reshape(resamples, n).astype(np.float64) @ d.T / n          # (resamples, rows)
    lo, hi = np.percentile(means, [50 * (1 - level), 50 * (1 + level)], axis=0)
    mean = d.mean(axis=1)
    return (mean[0], lo[0], hi[0]) if one else (mean, lo, hi)


def _agg(values: Mapping[str, np.ndarray], mask: np.ndarray) -> dict[str, float]:
    n = int(mask.sum())
    return {"n": n, **{m: round(float(values[m][mask].mean()), 4) if n else 0.0 for m in values}}


def _groups(corpora: Sequence[str], kinds: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
    corp, kind = np.asarray(corpora, dtype=object), np.asarray(kinds, dtype=object)
    return {"by_kind": {k: kind == k for k in sorted(set(kinds))},
            "by_corpus": {c: corp == c for c in sorted(set(corpora))}}


def _figures(values: Mapping[str, np.ndarray], groups: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, Any]:
    everything = np.ones(len(next(iter(values.values()))), dtype=bool)
    return {"overall": _agg(values, everything),
            **{g: {name: _agg(values, mask) for name, mask in masks.items()} for g, masks in groups.items()}}


def _interval(mean: float, lo: float, hi: float) -> dict[str, float]:
    return {"diff": round(float(mean), 4), "lo": round(float(lo), 4), "hi": round(float(hi), 4)}


def cross_validate(names: Sequence[str], ids: Sequence[str], corpora: Sequence[str], kinds: Sequence[str],
                   arrays: Mapping[str, np.ndarray], k: int = 5, seed: int = 0, resamples: int = 10_000,
                   select: str = "mrr@10", chooser: np.ndarray | None = None, chosen_on: str = "",
                   rule: str = "best") -> dict[str, Any]:
    """Cross-validation and bootstrap of per-case figures of several settings.

    Args:
        names: setting labels; ``names[0]`` is the default (the bootstrap baseline, and the winner of ties).
        ids, corpora, kinds: per case (strata of the folds: corpus x kind).
        arrays: ``{metric: (settings, cases) array}``; must hold ``select`` and the :data:`REPORTED` metrics.
        select: the metric a fold's setting is chosen by (and the bootstrap is of).
        chooser: ``(settings, cases)`` values to choose by instead of ``arrays[select]`` (e.g. the mean of the
            scoped and unscoped reciprocal ranks, so that one setting is chosen for both); ``chosen_on`` names them.
        rule: how a fold chooses (:func:`choose_per_fold`): ``"best"`` mean, or only a ``"clear"`` gain over the
            default.

    Returns:
        ``{"n", "k", "seed", "resamples", "select", "settings", "folds": [{"fold", "n", "chosen", "train", "held"}],
        "chosen_on", "out_of_fold": {"overall", "by_kind", "by_corpus"}, "in_sample": {setting: same}, "delta": {setting:
        {"overall": {"diff", "lo", "hi"}, "by_kind": {kind: {...}}, "by_corpus": {...}}}, "out_of_fold_delta": same
        shape}``; figures
        are ``{"n", metric: mean}`` rounded to 4 places; ``delta`` is of ``select`` against the default, one entry
        per non-default setting; ``train``/``held`` are the chosen setting's mean ``chooser`` on the other folds
        / mean ``select`` on the fold.
    """
    names = list(names)
    metrics = [m for m in dict.fromkeys([*REPORTED, select]) if m in arrays]
    arrays = {m: np.asarray(arrays[m], dtype=np.float64) for m in metrics}
    sel = arrays[select]
    if sel.shape != (len(names), len(ids)):
        raise ValueError(f"{select} array has shape {sel.shape}, expected ({len(names)}, {len(ids)})")
    choose = sel if chooser is None else np.asarray(chooser, dtype=np.float64)
    if choose.shape != sel.shape:
        raise ValueError(f"chooser has shape {choose.shape}, expected {sel.shape}")
    folds = assign_folds(ids, list(zip(corpora, kinds)), k=k, seed=seed)
    chosen = choose_per_fold(choose, folds, k, rule=rule, seed=seed)
    groups = _groups(corpora, kinds)
    oof = {m: out_of_fold(arrays[m], folds, chosen) for m in metrics}
    fold_rows = []
    for f in range(k):
        held = folds == f
        c = int(chosen[f])
        fold_rows.append({"fold": f + 1, "n": int(held.sum()), "chosen": names[c],
                          "train": round(float(choose[c, ~held].mean()), 4) if (~held).any() else 0.0,
                          "held": round(float(sel[c, held].mean()), 4) if held.any() else 0.0})
    in_sample = {name: _figures({m: arrays[m][i] for m in metrics}, groups) for i, name in enumerate(names)}

    def deltas(diff: np.ndarray) -> list[dict[str, Any]]:
        mean, lo, hi = paired_bootstrap(diff, resamples, seed)
        out: list[dict[str, Any]] = [{"overall": _interval(mean[r], lo[r], hi[r]), **{g: {} for g in groups}}
                                     for r in range(diff.shape[0])]
        for group, masks in groups.items():
            for gname, mask in masks.items():
                mean, lo, hi = paired_bootstrap(diff[:, mask], resamples, seed)
                for r in range(diff.shape[0]):
                    out[r][group][gname] = _interval(mean[r], lo[r], hi[r])
        return out

    rows = deltas(np.vstack([sel[1:] - sel[0], (oof[select] - sel[0])[None, :]]))
    return {
        "n": len(ids), "k": k, "seed": seed, "resamples": resamples, "select": select, "settings": names,
        "chosen_on": chosen_on or select, "rule": rule, "folds": fold_rows,
        "out_of_fold": _figures(oof, groups),
        "in_sample": in_sample,
        "delta": dict(zip(names[1:], rows[:-1])),
        "out_of_fold_delta": rows[-1],
    }


# ---------------------------------------------------------------------------------------------------------------
# text


def _ci(d: Mapping[str, float], width: int = 0) -> str:
    text = f"{d['diff']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"
    return f"{text:>{width}}" if width else text


def format_cv(res: Mapping[str, Any], scope: str) -> str:
    """The report of :func:`cross_validate` as text: header, folds, pooled table, per kind, per corpus, and the
    per-kind intervals of every setting."""
    sel, names, default = res["select"], res["settings"], res["settings"][0]
    oof = "out-of-fold"
    lw = max(32, *(len(n) + 13 for n in names))
    lines = [
        (f"{scope}: {res['n']} cases, {res['k']} folds stratified by corpus x kind (seed {res['seed']}), "
         f"{len(names)} settings; each fold's setting = best mean {res['chosen_on']} on the other "
         f"{res['k'] - 1} folds"
         + (" among the settings whose gain over the default is clear there (else the default)"
            if res.get("rule") == "clear" else "") + "; "
         f"95% intervals: paired bootstrap of {sel} minus the default's ({res['resamples']:,} resamples)"),
        "folds: " + "; ".join(f"{r['fold']} (n={r['n']}) {r['chosen']} {r['train']:.3f}->{r['held']:.3f}"
                              for r in res["folds"]),
        "",
        f"{'':<{lw}}" + "".join(f"{m:>8}" for m in REPORTED) + f"   {'Δ' + sel + ' vs default [95% CI]':>30}",
    ]

    def row(label: str, fig: Mapping[str, Any], delta: Mapping[str, float] | None) -> str:
        return (f"{label[:lw - 1]:<{lw}}" + "".join(f"{fig['overall'][m]:>8.3f}" for m in REPORTED)
                + (f"   {_ci(delta, 30)}" if delta else ""))

    lines.append(row(f"{oof} (chosen per fold)", res["out_of_fold"], res["out_of_fold_delta"]["overall"]))
    for name in names:
        lines.append(row(f"in-sample: {name}", res["in_sample"][name],
                         res["delta"][name]["overall"] if name != default else None))
    for group, title in (("by_kind", "kind"), ("by_corpus", "corpus")):
        lines += ["", f"{sel} per {title}",
                  f"{title:<16}{'n':>5}{'default':>10}{oof:>13}   {'Δ ' + oof + ' [95% CI]':<30}best in-sample"]
        for gname, fig in res["out_of_fold"][group].items():
            scores = {n: res["in_sample"][n][group][gname][sel] for n in names}
            best = max(names, key=lambda n: scores[n])          # first of equals: the default on a tie
            lines.append(f"{gname[:15]:<16}{fig['n']:>5}{res['in_sample'][default][group][gname][sel]:>10.3f}"
                         f"{fig[sel]:>13.3f}   {_ci(res['out_of_fold_delta'][group][gname]):<30}"
                         f"{best} {scores[best]:.3f}")
    kinds = list(res["out_of_fold"]["by_kind"])
    if len(names) > 1:
        nw = max(24, *(len(n) + 2 for n in names))
        lines += ["", f"Δ{sel} vs default per kind [95% CI], in-sample", f"{'setting':<{nw}}{'pooled':>25}"
                  + "".join(f"{k[:24]:>25}" for k in kinds)]
        for name in names[1:]:
            d = res["delta"][name]
            lines.append(f"{name:<{nw}}{_ci(d['overall'], 25)}" + "".join(_ci(d["by_kind"][k], 25) for k in kinds))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# main


def _per_case(args: argparse.Namespace, scopes: Sequence[str]) -> dict[str, Any]:
    """Search every case with every setting once per scope: ``{"settings": {label: overrides}, "cases": [{"id",
    "corpus", "kind"}], "scopes": {scope: {metric: [[per case] per setting]}}}`` (what --save-cases writes)."""
    from pipeline.evaluate import load_cases

    grids = dict(GRIDS)
    names = args.grid
    if args.grid_file:
        extra = load_grid_file(args.grid_file)
        grids.update(extra)
        names = names if names is not None else list(extra)
    settings = settings_list(grids, names if names is not None else list(GRIDS))
    cases = load_cases(args.evals)
    warehouse = args.data / "warehouse.duckdb"
    factory = cached_embedder_factory()
    extra_kw = {"synonyms": args.synonyms} if args.synonyms else {}
    out: dict[str, Any] = {"settings": {label: s for label, s in settings}, "cases": [],
                           "scopes": {scope: {m: [] for m in METRIC_KEYS} for scope in scopes}}
    ids: list[str] | None = None
    print(f"{len(cases)} cases, {len(settings)} settings, warehouse {warehouse}", file=sys.stderr)
    for i, (label, setting) in enumerate(settings, start=1):
        started = time.perf_counter()
        reports = evaluate_setting(warehouse, cases, setting, factory, scopes=scopes, **extra_kw)
        first = reports[scopes[0]]
        if ids is None:
            ids = [c["id"] for c in first["cases"]]
            out["cases"] = [{"id": c["id"], "corpus": c["corpus"], "kind": c["kind"]} for c in first["cases"]]
            if first["skipped"]:
                print(f"skipped {len(first['skipped'])} cases of sources not in the warehouse", file=sys.stderr)
        for scope, report in reports.items():
            if [c["id"] for c in report["cases"]] != ids:
                raise SystemExit(f"error: setting {label!r} scored other cases than the default")
            for m, values in per_case_arrays(report).items():
                out["scopes"][scope][m].append(values.round(6).tolist())
        figs = ", ".join(f"{scope} MRR {r['overall']['mrr@10']:.3f}" for scope, r in reports.items())
        print(f"[{i}/{len(settings)}] {label}: {figs} ({time.perf_counter() - started:.1f} s)", file=sys.stderr,
              flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, help="data dir of a build (its warehouse.duckdb)")
    ap.add_argument("--evals", type=Path, nargs="+", default=[SHARED / "evals"], help="eval files or folders")
    ap.add_argument("--grid", nargs="*", metavar="NAME",
                    help=f"grids to cross-validate (default: all of GRIDS, or of --grid-file): {', '.join(GRIDS)}")
    ap.add_argument("--grid-file", type=Path, metavar="FILE", help="more grids: a .py defining GRIDS, or .json")
    scope = ap.add_mutually_exclusive_group()
    scope.add_argument("--unscoped", action="store_true", help="search each case over all sources")
    scope.add_argument("--both", action="store_true", help="scoped and unscoped (each cross-validated on its own)")
    ap.add_argument("--k", type=int, default=5, help="folds (default 5)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the fold order and the bootstrap (default 0)")
    ap.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10,000)")
    ap.add_argument("--select", choices=METRIC_KEYS, default="mrr@10", help="metric a fold's setting is chosen by")
    ap.add_argument("--choose-on", choices=("scope", "both"), default=None,
                    help="with --both: choose each fold's setting on the mean of the scoped and unscoped figures "
                         "('both', the default: one setting for both scopes) or on each scope's own ('scope')")
    ap.add_argument("--rule", choices=("best", "clear"), default="best",
                    help="how a fold chooses its setting: the best mean on the other folds ('best'), or only a "
                         "setting whose gain over the default is clear there (paired bootstrap interval above "
                         "zero; else the default: 'clear', the project's rule for changing a default)")
    ap.add_argument("--synonyms", type=Path, metavar="FILE", help="BM25 synonyms file for every searcher")
    ap.add_argument("--save-cases", type=Path, metavar="FILE", help="write the per-case figures (JSON) for --load-cases")
    ap.add_argument("--load-cases", type=Path, metavar="FILE",
                    help="analyse saved per-case figures (every saved setting; --grid is ignored); no search")
    ap.add_argument("--json", action="store_true", help="the full result as JSON on stdout")
    args = ap.parse_args(argv)
    scopes = ["scoped", "unscoped"] if args.both else ["unscoped"] if args.unscoped else ["scoped"]
    try:
        if args.load_cases:
            per_case = json.loads(args.load_cases.read_text(encoding="utf-8"))
            missing = [s for s in scopes if s not in per_case["scopes"]]
            if missing:
                raise ValueError(f"{args.load_cases} has no {', '.join(missing)} figures; "
                                 f"it has {', '.join(per_case['scopes'])}")
        elif args.data is None:
            raise ValueError("give --data DIR (a built data dir) or --load-cases FILE")
        else:
            per_case = _per_case(args, scopes)
    except (ValueError, TypeError, OSError) as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.save_cases:
        args.save_cases.write_text(json.dumps(per_case, ensure_ascii=False, default=list), encoding="utf-8")
    cases = per_case["cases"]
    if not cases:
        raise SystemExit("error: no case was scored (no eval case of a source in the warehouse)")
    names = list(per_case["settings"])
    ids, corpora, kinds = ([c[key] for c in cases] for key in ("id", "corpus", "kind"))
    arrays = {scope: {m: np.array(v, dtype=np.float64) for m, v in per_case["scopes"][scope].items()}
              for scope in scopes}
    joint = len(scopes) == 2 and (args.choose_on or "both") == "both"
    chooser = sum(arrays[s][args.select] for s in scopes) / len(scopes) if joint else None
    results = {}
    for scope in scopes:
        results[scope] = cross_validate(names, ids, corpora, kinds, arrays[scope], k=args.k, seed=args.seed,
                                        resamples=args.resamples, select=args.select, chooser=chooser,
                                        chosen_on=f"{args.select} (mean of scoped and unscoped)" if joint else "",
                                        rule=args.rule)
    if args.json:
        print(json.dumps({"settings": per_case["settings"], **results}, ensure_ascii=False, indent=2, default=list))
    else:
        print("\n\n".join(format_cv(res, scope) for scope, res in results.items()))


if __name__ == "__main__":
    main()
