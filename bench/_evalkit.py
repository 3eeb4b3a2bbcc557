"""Shared machinery of the bench eval scripts (``fusion.py``, ``cv.py``): settings grids, one Searcher per setting
with the query vectors cached across settings, per-case metrics of a setting (scoped and/or unscoped) and grid files.

A *setting* is a dict of overrides of a :class:`pipeline.search.searcher.Searcher`: each key is a constructor parameter
(``k_rrf``, ``weights`` (merged into the default weights), ``page_vector_weight``, ...), or ``lanes`` (the lanes to
fuse, passed to ``rank_pages``), or any other attribute the Searcher has after construction (set with ``setattr``
before the first query, so a new Searcher attribute can be swept without changing this file). ``{}`` is the default.

A *grid* is a list of ``(label, setting)``; grids are named: ``{"k": [("k_rrf=20", {"k_rrf": 20.0}), ...]}``.
"""

from __future__ import annotations

import inspect
import json
import os
import runpy
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("DOCSVAULT_SHARED", REPO.parent / "shared")).resolve()
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

Setting = dict[str, Any]
Grid = list[tuple[str, Setting]]

#: The fusion grids (one setting changed at a time against the default); ``fusion.py`` and ``cv.py`` start from them.
FUSION_GRIDS: dict[str, Grid] = {
    "page_vector": [(f"page_vector_weight={w:g}", {"page_vector_weight": w}) for w in (0.0, 0.3, 0.5, 0.75, 1.5)],
    "page_lane": [("without bm25_page", {"lanes": ("bm25", "vector")})]
    + [(f"bm25_page weight={w:g}", {"weights": {"bm25_page": w}}) for w in (0.25, 1.0)],
    "k": [(f"k_rrf={k:g}", {"k_rrf": k}) for k in (20.0, 40.0, 100.0)],
    "lanes": [(f"{lane} alone", {"lanes": (lane,)}) for lane in ("bm25", "bm25_page", "vector")],
}

METRIC_KEYS: tuple[str, ...] = ("mrr@10", "hit@1", "hit@3", "ndcg@10")


# ---------------------------------------------------------------------------------------------------------------
# settings and grids


def label_of(setting: Mapping[str, Any]) -> str:
    """A readable label of a setting: ``k_rrf=20, weights.bm25_page=0.25, lanes=bm25+vector``; ``default`` for {}."""
    parts = []
    for key, value in setting.items():
        if isinstance(value, Mapping):
            parts += [f"{key}.{k}={v:g}" if isinstance(v, float) else f"{key}.{k}={v}" for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            parts.append(f"{key}={'+'.join(map(str, value))}")
        else:
            parts.append(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}")
    return ", ".join(parts) or "default"


def product_grid(**axes: Sequence[Any]) -> Grid:
    """Every combination of the given parameter values: ``product_grid(k_rrf=[20, 60], page_vector_weight=[0.5,
    1.0])`` gives 4 settings, labelled by :func:`label_of`."""
    keys = list(axes)
    return [(label_of(s), s) for s in (dict(zip(keys, values)) for values in product(*(axes[k] for k in keys)))]


def _setting(raw: Any, where: str) -> Setting:
    if not isinstance(raw, Mapping):
        raise TypeError(f"{where}: a setting must be a mapping of Searcher overrides, got {raw!r}")
    out = dict(raw)
    if isinstance(out.get("lanes"), list):
        out["lanes"] = tuple(out["lanes"])
    return out


def normalize_grid(raw: Any, where: str) -> Grid:
    """A grid given as a list of ``(label, setting)`` pairs, a list of settings (labelled by :func:`label_of`) or a
    mapping ``label -> setting``, as a list of ``(label, setting)``.

    Raises:
        ValueError: any other shape (the message names ``where``).
    """
    if isinstance(raw, Mapping):
        return [(str(label), _setting(s, f"{where}[{label!r}]")) for label, s in raw.items()]
    if isinstance(raw, (list, tuple)):
        out: Grid = []
        for i, item in enumerate(raw):
            if isinstance(item, Mapping):
                s = _setting(item, f"{where}[{i}]")
                out.append((label_of(s), s))
            elif isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str):
                out.append((item[0], _setting(item[1], f"{where}[{i}]")))
            else:
                raise ValueError(f"{where}[{i}]: expected (label, setting) or a setting mapping, got {item!r}")
        return out
    raise ValueError(f"{where}: a grid is a list of (label, setting) pairs, a list of settings or a mapping "
                     f"label -> setting, got {type(raw).__name__}")


def load_grid_file(path: Path) -> dict[str, Grid]:
    """Grids from a file: a Python file defining ``GRIDS = {name: grid}`` (it may use :func:`product_grid` and
    :data:`FUSION_GRIDS` from ``_evalkit``), or a JSON object ``{name: grid}`` (lanes as a list). Each grid in any
    form :func:`normalize_grid` takes.

    Raises:
        ValueError: the file is missing, not valid JSON, defines no ``GRIDS`` mapping, or a grid is malformed
            (the message names the file).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"grid file not found: {path}")
    if path.suffix == ".py":
        grids = runpy.run_path(str(path)).get("GRIDS")
        if not isinstance(grids, Mapping):
            raise ValueError(f"{path}: define GRIDS = {{name: [(label, {{searcher overrides}}), ...]}}")
    else:
        try:
            grids = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read a JSON grid file ({exc})") from exc
        if not isinstance(grids, Mapping):
            raise ValueError(f"{path}: expected a JSON object {{grid name: grid}}")
    return {str(name): normalize_grid(grid, f"{path}: grid {name!r}") for name, grid in grids.items()}


def settings_list(grids: Mapping[str, Grid], names: Iterable[str]) -> Grid:
    """``[("default", {})]`` then the settings of the named grids in order; a setting equal to the default or to
    an earlier one under the same label is dropped.

    Raises:
        ValueError: an unknown grid name, or one label for two different settings.
    """
    out: dict[str, Setting] = {"default": {}}
    for name in names:
        if name not in grids:
            raise ValueError(f"unknown grid {name!r}; available: {', '.join(grids) or '(none)'}")
        for label, setting in grids[name]:
            if label in out and out[label] != setting:
                raise ValueError(f"grid {name!r}: label {label!r} names two different settings: "
                                 f"{out[label]!r} and {setting!r}")
            if setting or label != "default":
                out.setdefault(label, dict(setting))
    return list(out.items())


# ---------------------------------------------------------------------------------------------------------------
# searchers


def cached_embedder_factory(loader: Callable[[str], Any] | None = None) -> Callable[[str], Any]:
    """An ``embedder_factory`` for every Searcher of a run: one embedder per model, each query embedded once per
    model however many settings search it."""
    if loader is None:
        from pipeline.index.embed import load_embedder as loader
    embedders: dict[str, Any] = {}

    def factory(model_id: str) -> Any:
        if model_id not in embedders:
            inner = loader(model_id)
            memo: dict[str, Any] = {}

            class Memo:
                def __init__(self) -> None:
                    self.model_id, self.dim = inner.model_id, inner.dim

                def __getattr__(self, name: str) -> Any:        # anything else the searcher asks of a model
                    return getattr(inner, name)

                def embed_query(self, q: str) -> Any:
                    if q not in memo:
                        memo[q] = inner.embed_query(q)
                    return memo[q]

            embedders[model_id] = Memo()
        return embedders[model_id]

    return factory


def open_searcher(warehouse: Path, setting: Mapping[str, Any], factory: Callable[[str], Any], **extra: Any
                  ) -> tuple[Any, tuple[str, ...] | None]:
    """A Searcher of ``warehouse`` with ``setting`` applied, and the lanes to pass to ``rank_pages`` (None: the
    searcher's default lanes). ``extra`` are constructor arguments for every setting (e.g. ``synonyms``).

    Raises:
        ValueError: a key is neither a constructor parameter, ``lanes`` nor an attribute of the Searcher.
    """
    from pipeline.search.searcher import Searcher

    params = set(inspect.signature(Searcher.__init__).parameters) - {"self", "warehouse_path"}
    setting = dict(setting)
    lanes = setting.pop("lanes", None)
    kwargs = {k: v for k, v in setting.items() if k in params}
    attrs = {k: v for k, v in setting.items() if k not in params}
    searcher = Searcher(Path(warehouse), embedder_factory=factory, **extra, **kwargs)
    unknown = [k for k in attrs if not hasattr(searcher, k)]
    if unknown:
        searcher.close()
        raise ValueError(f"setting {label_of(setting)!r}: {', '.join(map(repr, unknown))} is neither a Searcher "
                         f"parameter ({', '.join(sorted(params))}), 'lanes' nor a Searcher attribute")
    for k, v in attrs.items():
        setattr(searcher, k, v)
    return searcher, (tuple(lanes) if lanes is not None else None)


def evaluate_setting(warehouse: Path, cases: Sequence[Any], setting: Mapping[str, Any],
                     factory: Callable[[str], Any], scopes: Sequence[str] = ("scoped",), **extra: Any
                     ) -> dict[str, dict[str, Any]]:
    """:func:`pipeline.evaluate.run_eval` reports of one setting, one per scope: ``{scope: report}``; each report
    gets ``seconds`` (wall time of its searches)."""
    from pipeline.evaluate import run_eval

    searcher, lanes = open_searcher(warehouse, setting, factory, **extra)
    out = {}
    try:
        for scope in scopes:
            started = time.perf_counter()
            out[scope] = run_eval(searcher, cases, lanes=lanes, scope=scope).as_dict()   # a dict: seconds is added
            out[scope]["seconds"] = round(time.perf_counter() - started, 2)
    finally:
        searcher.close()
    return out


def per_case_arrays(report: Mapping[str, Any], metrics: Sequence[str] = METRIC_KEYS) -> dict[str, np.ndarray]:
    """The per-case values of a run_eval report as arrays in case order: ``{metric: (n,) float64}``."""
    return {m: np.array([c[m] for c in report["cases"]], dtype=np.float64) for m in metrics}
