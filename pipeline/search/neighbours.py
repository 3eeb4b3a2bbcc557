"""A note's neighbours in the link graph: outlinks and backlinks (for ``read``, ``search --json`` and MCP), and
``related``: neighbours up to two hops ranked by link weight and vector similarity. Titles come without
terminal escape sequences or control characters (:func:`~pipeline.search.snippet.strip_controls`), as a search
hit's.

Link weight follows the graph lane of search: an outlink counts its links x1, a backlink x0.5; a two-hop neighbour
gets the product of its two hops' shares, x0.5. ``related`` scores a neighbour
``LINK_WEIGHT x weight / max weight + SIMILARITY_WEIGHT x cosine(note vector, neighbour vector)``, where a note's
vector is the normalised mean of its chunk vectors, compared in the best model both notes have (0 when they have
none in common), or, when some neighbours share only the cross-lingual model with the note (another language),
every neighbour in that model: one scale for all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pipeline import warehouse as wh
from pipeline.search.reader import NoteNotFoundError
from pipeline.search.snippet import strip_controls

__all__ = ["LINKS_CAP", "LINK_WEIGHT", "SIMILARITY_WEIGHT", "links_of", "related"]

LINKS_CAP = 10                # outlinks / backlinks listed per note (the totals are given too)
LINK_WEIGHT = 0.5             # share of the normalised link weight in a related score
SIMILARITY_WEIGHT = 0.5       # share of the cosine similarity
BACKLINK_WEIGHT = 0.5         # a backlink counts half an outlink (as in the graph lane)
TWO_HOP_WEIGHT = 0.5          # a neighbour's neighbour counts half
RELATED_CANDIDATES = 200      # two-hop candidates scored at most


def _note_id(con: Any, vault_path: str) -> str:
    note = wh.note_by_vault_path(con, vault_path)
    if note is None:
        raise NoteNotFoundError(f"no note {vault_path!r} in the warehouse; use a vault_path from search results "
                                "(or run `docsvault build` if the note is new)")
    return str(note["note_id"])


def _short(rows: list[dict[str, Any]], cap: int | None) -> list[dict[str, Any]]:
    return [{"path": r["path"], "title": strip_controls(r["title"]), "links": r["count"]} for r in rows[:cap]]


def links_of(con: Any, vault_path: str, cap: int | None = LINKS_CAP) -> dict[str, Any]:
    """Outlinks and backlinks of a note.

    Args:
        con: a warehouse connection (:func:`pipeline.warehouse.connect`).
        vault_path: the note's vault path.
        cap: at most this many of each (most links first, then by path); None: all of them.

    Returns:
        ``{"outlinks": [{"path", "title", "links"}], "backlinks": [...], "outlinks_total": int,
        "backlinks_total": int}``; empty lists when the note is not in the warehouse.
    """
    note = wh.note_by_vault_path(con, vault_path)
    if note is None:
        return {"outlinks": [], "backlinks": [], "outlinks_total": 0, "backlinks_total": 0}
    out, back = wh.note_links(con, str(note["note_id"]))
    return {"outlinks": _short(out, cap), "backlinks": _short(back, cap), "outlinks_total": len(out),
            "backlinks_total": len(back)}


def links_for_paths(warehouse_path: Path, vault_paths: list[str],
                    cap: int | None = LINKS_CAP) -> dict[str, dict[str, Any]]:
    """:func:`links_of` for several notes through one read-only connection: vault path -> its links."""
    con = wh.connect(Path(warehouse_path), read_only=True)
    try:
        return {p: links_of(con, p, cap) for p in dict.fromkeys(vault_paths)}
    finally:
        con.close()


def _similarities(con: Any, me: str, ids: list[str]) -> dict[str, float]:
    """note_id -> cosine of its note vector and ``me``'s, for the ``ids`` with a vector in a model ``me`` has too.

    The best over the models both notes have, unless some of ``ids`` share only the cross-lingual model with
    ``me`` (the warehouse's ``crosslingual_model``: a Japanese note's English neighbours): then every pair is
    compared in that model, one scale for all. The models' cosines are not comparable: multilingual-e5 gives any
    two Japanese notes 0.85-0.95, the cross-lingual model a Japanese and an English note on the same topic 0.04-0.5,
    so the best over the models put a Japanese note's unrelated two-hop Japanese neighbours above its English
    outlinks (session 41). A vault of one language ranks as before."""
    models = wh.list_models(con)
    cross_id = wh.read_meta(con).get("crosslingual_model", "")
    vecs = {m["model_id"]: wh.note_vectors(con, m["table_name"], [me, *ids]) for m in models}
    vecs = {model: v for model, v in vecs.items() if me in v}
    own = {nid for model, v in vecs.items() if model != cross_id for nid in ids if nid in v}
    if cross_id in vecs and any(nid in vecs[cross_id] and nid not in own for nid in ids):
        vecs = {cross_id: vecs[cross_id]}
    sims: dict[str, float] = {}
    for v in vecs.values():
        for nid in ids:
            if nid in v:
                sims[nid] = max(sims.get(nid, -1.0), float(np.dot(v[me], v[nid])))
    return sims


def related(warehouse_path: Path, vault_path: str, k: int = 10) -> list[dict[str, Any]]:
    """Notes related to a note through the link graph (one and two hops), best first.

    Args:
        warehouse_path: the warehouse file.
        vault_path: the note's vault path.
        k: at most this many (k >= 1).

    Returns:
        ``[{"path", "title", "score", "hops" (1 or 2), "link_weight", "similarity"}]``; score as in the module
        docstring, rounded to 4 places; ties by path. Empty when the note has no links.

    Raises:
        NoteNotFoundError: the note is not in the warehouse.
        ValueError: k < 1.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    con = wh.connect(Path(warehouse_path), read_only=True)
    try:
        me = _note_id(con, vault_path)

        def hop(nid: str) -> dict[str, tuple[float, str, str]]:
            out, back = wh.note_links(con, nid)
            w: dict[str, tuple[float, str, str]] = {}
            for r in out:
                w[r["note_id"]] = (w.get(r["note_id"], (0.0, "", ""))[0] + r["count"], r["path"], r["title"])
            for r in back:
                w[r["note_id"]] = (w.get(r["note_id"], (0.0, "", ""))[0] + BACKLINK_WEIGHT * r["count"], r["path"],
                                   r["title"])
            return w

        first = hop(me)
        first.pop(me, None)
        total = sum(v[0] for v in first.values()) or 1.0
        cand: dict[str, list[Any]] = {nid: [v[0] / total, v[1], v[2], 1] for nid, v in first.items()}
        for nid, (w1, _, _) in sorted(first.items(), key=lambda kv: -kv[1][0])[:20]:
            second = hop(nid)
            t2 = sum(v[0] for v in second.values()) or 1.0
            for other, (w2, path, title) in second.items():
                if other == me or other in first:
                    continue
                share = TWO_HOP_WEIGHT * (w1 / total) * (w2 / t2)
                if other in cand:
                    cand[other][0] += share
                else:
                    cand[other] = [share, path, title, 2]
        if not cand:
            return []
        ranked_by_link = sorted(cand.items(), key=lambda kv: -kv[1][0])[:RELATED_CANDIDATES]
        cand = dict(ranked_by_link)
        sims = _similarities(con, me, list(cand))
    finally:
        con.close()
    top = max(v[0] for v in cand.values()) or 1.0
    rows = []
    for nid, (weight, path, title, hops) in cand.items():
        sim = sims.get(nid, 0.0)
        score = LINK_WEIGHT * weight / top + SIMILARITY_WEIGHT * sim
        rows.append({"path": path, "title": strip_controls(title), "score": round(score, 4), "hops": hops,
                     "link_weight": round(weight, 4), "similarity": round(sim, 4)})
    rows.sort(key=lambda r: (-r["score"], r["path"]))
    return rows[:k]
