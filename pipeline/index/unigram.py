"""A SentencePiece-unigram Viterbi in plain Python for short texts (queries): the same ids as the HF ``tokenizers``
``Unigram`` model that :class:`pipeline.index.embed.E5Tokenizer` runs, without loading it.

Why: loading the 250k-piece multilingual-e5 vocabulary into ``tokenizers`` (``Tokenizer.from_file`` of a 17 MB JSON)
costs ~1 s of CPU and ~300 MB of memory in every search process, for a query of a few dozen characters. A piece ->
id dictionary costs ~0.2 s and ~30 MB, and a query's Viterbi over it well under a millisecond.

The algorithm is ``Unigram::encode_optimized`` of HF tokenizers (0.2x): positions left to right; at each reachable
position every vocabulary piece that starts there (shortest first) proposes ``path score + piece score`` for the
position where it ends, taken only when strictly better (ties keep the earlier proposal); where no single-character
piece starts, an unknown character is proposed with score ``min(scores) - 10``. The best path is read back from the
end. ``tokenizers`` then fuses a run of unknown characters into one ``<unk>``, which ``E5Tokenizer.content_ids``
splits again into one per character: here each unknown character is its own ``<unk>`` from the start.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["UNK_PENALTY", "UnigramViterbi"]

#: tokenizers' ``K_UNK_PENALTY``: an unknown character scores this much below the lowest piece
UNK_PENALTY = 10.0


class UnigramViterbi:
    """Viterbi segmentation over a unigram vocabulary.

    Args:
        pieces: the vocabulary, one string per id (a duplicate string maps to its last id, as in tokenizers).
        scores: log-probability per id, same length (read as Python floats, i.e. float64).
        unk: the id of unknown characters.

    Raises:
        ValueError: ``pieces`` and ``scores`` differ in length, or ``unk`` is out of range.
    """

    def __init__(self, pieces: Sequence[str], scores: Sequence[float], unk: int) -> None:
        if len(pieces) != len(scores):
            raise ValueError(f"{len(pieces)} pieces but {len(scores)} scores")
        if not 0 <= unk < len(pieces):
            raise ValueError(f"unk id {unk} outside the vocabulary of {len(pieces)} pieces")
        self.unk = unk
        self._ids = {p: i for i, p in enumerate(pieces)}
        self._scores = [float(s) for s in scores]
        self._unk_score = min(self._scores) - UNK_PENALTY
        self._max_len = max((len(p) for p in pieces), default=1)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (already normalized: metaspace form), one ``unk`` per unknown character (and per
        character of a matched piece whose id is ``unk``)."""
        n = len(text)
        if not n:
            return []
        ids, scores, max_len = self._ids, self._scores, self._max_len
        best = [0.0] * (n + 1)
        start: list[int] = [-1] * (n + 1)        # where the best path to each end position starts its last token
        token = [0] * (n + 1)
        start[0] = 0
        for i in range(n):
            if start[i] < 0:                     # unreachable (cannot happen: unknown characters always advance)
                continue
            here = best[i]
            single = False
            for j in range(i + 1, min(n, i + max_len) + 1):
                tid = ids.get(text[i:j])
                if tid is None:
                    continue
                cand = here + scores[tid]
                if start[j] < 0 or cand > best[j]:
                    best[j], start[j], token[j] = cand, i, tid
                if j == i + 1:
                    single = True
            if not single:
                cand = here + self._unk_score
                if start[i + 1] < 0 or cand > best[i + 1]:
                    best[i + 1], start[i + 1], token[i + 1] = cand, i, self.unk
        out: list[int] = []
        j = n
        while j > 0:
            # a piece whose id is ``unk`` (the vocabulary's own unk string matched) counts as one <unk> per
            # character, as tokenizers' unk run split by E5Tokenizer.content_ids
            out.extend([token[j]] * (j - start[j] if token[j] == self.unk else 1))
            j = start[j]
        out.reverse()
        return out
