"""``docsvault check-vault``: is the built vault one Obsidian users can trust? Read-only checks per source:

* ``unresolved_in_source``: embeds/links of attachment files (images, audio, video, PDF, canvas) that do not
  resolve in the vault although the file exists in the source (target 0: the build copies them);
  ``unresolved_elsewhere`` counts those whose file is not in the source either (nothing to copy; e.g. images the
  upstream repository does not hold);
* ``markup``: source-format markup left in the notes outside code (``<span>``, ``<div>``, Liquid ``{{ }}``/``{% %}``,
  MDX/JSX components such as ``<CodeStep>``; see :func:`markup_residue`), target 0; not checked for a
  ``format: obsidian`` source, whose notes are Obsidian's own format: HTML and template placeholders such as
  ``{{title}}`` in a templates folder are what the user wrote, not conversion residue (``markup`` is then None);
* ``bad_mode``: notes whose permission bits are not what the user's umask gives a new file (0644 under 0022);
* ``user_files`` / ``edited`` / ``edited_copies``: files in ``vault/<source>/`` the build did not write (kept,
  never changed by a build), generated files edited since the build wrote them (the next build moves the edit to
  ``<name> (edited).md``), and those ``(edited)`` copies of your edits that a build made (kept, never changed by a
  build; merge them into the note and delete them when done);
* ``dangling_links`` / ``dangling``: links of the source's notes to a note no source has (what ``status``
  counts as dangling), when the caller resolved them (:func:`pipeline.service.dangling_links`: link resolution
  is the graph's, a later layer); not a problem (Obsidian makes the note when one is clicked), but named;
* ``missing_heading_links`` / ``missing_headings``: links of the source's notes to a note that exists but has
  no such ``#heading`` or ``#^block`` (:func:`pipeline.index.graph.missing_subpaths`; Obsidian opens the note
  at its top), named as the dangling links are, and no problem for ``ok`` either;
* ``site_absolute``: what explains dangling site-absolute links that match notes of the source once a prefix
  is dropped (:func:`site_absolute_hint`).

Embeds resolve as in Obsidian: relative to the note, from the vault root, from the source's folder, or as a path
suffix / bare name of any file in the vault.
"""

from __future__ import annotations

import re
import stat
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.config import Settings
from pipeline.models import Source

MARKUP_PATTERNS: dict[str, re.Pattern[str]] = {
    "span": re.compile(r"(?<!\\)</?span\b[^>\n]*>", re.IGNORECASE),
    "div": re.compile(r"(?<!\\)</?div\b[^>\n]*>", re.IGNORECASE),
    "liquid": re.compile(r"\{\{[^{}\n]{0,300}\}\}|\{%[^\n]{0,300}?%\}"),
    "mdx": re.compile(r"(?:(?<![A-Za-z_`\\])<|(?<!\\)</)[A-Z][A-Za-z0-9]*(?:\.[A-Za-z0-9]+)*(?:\s[^<>\n]{0,300})?/?>"),
}
"""Markup that must not be left in a note outside code: kind -> pattern."""


def markup_residue(body: str) -> list[tuple[str, str]]:
    """``(kind, text)`` of every :data:`MARKUP_PATTERNS` match in the prose of a Markdown body (fenced code and
    inline code spans are not prose), in order of kind then position."""
    from pipeline.common.markdown import split_code
    from pipeline.ingest.normalize import _protect_inline_code

    found: list[tuple[str, str]] = []
    prose = [_protect_inline_code(chunk)[0] for is_code, chunk in split_code(body) if not is_code]
    for kind, rx in MARKUP_PATTERNS.items():
        for text in prose:
            found.extend((kind, m.group()) for m in rx.finditer(text))
    return found


#: what :func:`user_files_lines` says after a source's name and a count of generated files edited / deleted in the
#: vault (``status`` names the sources of such lines as the cause of a warehouse ``behind``)
EDITED_FILES = " generated file(s) edited since the last build: "
DELETED_FILES = " generated file(s) deleted since the last build: "


def user_files_lines(settings: Settings, source: Source) -> list[str]:
    """Lines naming the files in ``vault/<source>/`` the build did not write, and the generated files edited since
    the build wrote them ([] when there are none). For ``status`` and ``check-vault``."""
    from pipeline.ingest.ownership import audit

    root = settings.vault_dir / source.name
    if not root.is_dir():
        return []
    a = audit(root, source.name)
    lines = []
    if a.user_files:
        lines.append(f"{source.name}: {len(a.user_files)} file(s) in vault/{source.name}/ that docsvault did not "
                     f"write are kept (never changed or removed by a build): {_names(a.user_files)}")
    if a.edited:
        lines.append(f"{source.name}: {len(a.edited)}{EDITED_FILES}{_names(a.edited)}; the next build keeps your "
                     "version, as '<name> (edited).md' next to the note, or where it is when its page has left the "
                     "source")
    # an Obsidian vault's templates folder, which builds leave out: the next build writes no note of it again (a
    # template's note an earlier version wrote, deleted by hand before the upgraded build)
    from pipeline.ingest.fetch.base import left_out_templates

    folders = tuple(f"{t}/" for t in left_out_templates(source)) if getattr(source, "kind", None) == "local" else ()
    templates = [rel for rel in a.missing if rel.startswith(folders)]
    missing = [rel for rel in a.missing if rel not in templates]
    if missing:
        lines.append(f"{source.name}: {len(missing)}{DELETED_FILES}{_names(missing)}; search still serves them, "
                     "and the next build writes them again")
    if templates:
        where = ", ".join(repr(f) for f in folders if any(rel.startswith(f) for rel in templates))
        lines.append(f"{source.name}: {len(templates)} generated file(s) of the Obsidian vault's templates folder "
                     f"{where} deleted since the last build: {_names(templates)}; search still serves them until the "
                     "next build, which leaves that folder out")
    if a.copies:
        lines.append(f"{source.name}: {len(a.copies)} copy(ies) of your edits to generated notes, kept as a build "
                     f"replaced the note (never changed or removed by a build; merge and delete them when done): "
                     f"{_names(a.copies)}")
    return lines


def _names(rels: Sequence[str], limit: int = 10) -> str:
    return ", ".join(rels[:limit]) + (f" and {len(rels) - limit} more" if len(rels) > limit else "")


class _VaultFiles:
    """Every file of the vault (posix, NFC, relative to the vault root), found for a link as the build finds an
    attachment in the source to copy it (:class:`pipeline.ingest.attachments._Index`: relative to the note for a
    Markdown link or ``./``/``../``, from the root, then by path suffix or bare name)."""

    def __init__(self, vault: Path) -> None:
        from pipeline.ingest.attachments import _Index
        from pipeline.ingest.ownership import walk_files

        self._index = _Index(walk_files(vault))

    def resolves(self, target: str, note_vault_path: str, markdown: bool) -> bool:
        return self._index.resolve(target, note_vault_path, markdown) is not None


def check_vault(settings: Settings, sources: Sequence[Source],
                dangling: Sequence[Mapping[str, Any]] | None = None,
                missing_headings: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Run the checks (module doc) over the built vault for these sources.

    Args:
        dangling: every dangling link of the vault, ``{"path": note vault path, "link": as the vault has it,
            "file": the note's source path, "line": its line there or None, "written": as written there}``
            (:func:`pipeline.service.link_problems`); None: not checked.
        missing_headings: the same of every link to a heading or block its note does not have
            (:func:`pipeline.service.link_problems`); None: not checked.

    Returns:
        ``{"vault", "ok", "expected_mode" ("0644"), "sources": [{"name", "notes", "attachments_in_vault",
        "unresolved_in_source", "unresolved_elsewhere", "markup" (None: not checked, a ``format: obsidian``
        source), "bad_mode", "user_files", "edited", "edited_copies", "dangling_links" (their count, None when
        ``dangling`` is), "dangling" (all of them: ``[{"path", "link", "file", "line", "written"}]``, in path
        order; with ``"skipped"`` (:func:`_mark_skipped`) or ``"did_you_mean"`` (:func:`_mark_near`) when known),
        "missing_heading_links" (their count, None when ``missing_headings`` is), "missing_headings" (all of
        them, as ``dangling``), "site_absolute" (:func:`site_absolute_hint`),
        "examples": {"unresolved_in_source": [...], "markup": [...], "bad_mode": [...]}}]}``; ``ok`` is False when
        any source has unresolved embeds of files in its source, markup outside code or a note with another
        mode (dangling links do not count). Examples are ``"<vault path>: <detail>"`` strings, at most 10 per
        kind.

    Long: one pass over each source's notes gathers every per-note check (embeds, markup, modes) and the
    per-source link figures into one record; split, each part would walk the notes again.
    """
    from pipeline.common.artifacts import file_mode
    from pipeline.common.errors import NoteError
    from pipeline.ingest.attachments import _Index, _targets, list_candidates, source_roots
    from pipeline.ingest.ownership import audit
    from pipeline.ingest.vault import read_notes

    vault = settings.vault_dir
    files = _VaultFiles(vault) if vault.is_dir() else None
    want_mode = file_mode()
    rows = []
    stems: dict[str, set[str]] = {}             # source name -> its notes' paths as a link names them
    source_paths: dict[str, list[str]] = {}     # source name -> its notes' paths in the source folder
    titled: dict[str, dict[str, list[str]]] = {}    # source name -> a title or alias (_title_key) -> those paths
    for source in sources:
        root = vault / source.name
        row: dict[str, Any] = {"name": source.name, "notes": 0, "attachments_in_vault": 0, "unresolved_in_source": 0,
                               "unresolved_elsewhere": 0, "markup": 0, "bad_mode": 0, "user_files": 0, "edited": 0,
                               "edited_copies": 0,
                               "examples": {"unresolved_in_source": [], "markup": [], "bad_mode": []}}
        rows.append(row)
        if files is None or not root.is_dir():
            continue
        ex = row["examples"]
        try:
            notes = read_notes(vault, [source.name])
        except NoteError as exc:
            row["error"] = str(exc)
            continue
        row["notes"] = len(notes)
        stems[source.name] = _note_stems(note.rel_path for note in notes)
        source_paths[source.name] = [note.source_path for note in notes]
        for note in notes:      # what a dangling link may name a note by, besides its file: its title and aliases
            aliases = note.frontmatter.get("aliases") if isinstance(note.frontmatter, dict) else None
            for name in [note.title, *(aliases if isinstance(aliases, list) else [aliases])]:
                if isinstance(name, str) and _title_key(name):
                    titled.setdefault(source.name, {}).setdefault(_title_key(name), []).append(note.source_path)
        if source.format == "obsidian":     # the user's own format: its HTML and {{placeholders}} are content
            row["markup"] = None
        index = _Index(list_candidates(source, source_roots(source, settings.raw_dir), []))
        rendered = source.format == "html" or source.kind == "html"
        for note in notes:
            vp = note.vault_path
            for target, markdown in _targets(note.body):
                if files.resolves(target, vp, markdown):
                    continue
                if index.resolve(target, unicodedata.normalize("NFC", note.source_path), markdown):
                    row["unresolved_in_source"] += 1
                    if len(ex["unresolved_in_source"]) < 10:
                        ex["unresolved_in_source"].append(f"{vp}: {target}")
                else:
                    row["unresolved_elsewhere"] += 1
            for kind, text in (markup_residue(note.body) if row["markup"] is not None else ()):
                if kind == "liquid" and rendered:       # a built site's {{ }} is its text (templates ran already)
                    continue
                row["markup"] += 1
                if len(ex["markup"]) < 10:
                    ex["markup"].append(f"{vp}: {kind}: {text[:80]}")
            try:
                mode = stat.S_IMODE((root / note.rel_path).stat().st_mode)
            except OSError:
                continue
            if mode != want_mode:
                row["bad_mode"] += 1
                if len(ex["bad_mode"]) < 10:
                    ex["bad_mode"].append(f"{vp}: {mode:04o}")
        a = audit(root, source.name)
        row["user_files"], row["edited"], row["edited_copies"] = len(a.user_files), len(a.edited), len(a.copies)
        row["attachments_in_vault"] = sum(1 for rel in a.owned if not rel.endswith(".md"))
    ok = all(not (r["unresolved_in_source"] or r["markup"] or r["bad_mode"] or r.get("error")) for r in rows)
    _add_links(rows, "dangling_links", "dangling", dangling)
    _add_links(rows, "missing_heading_links", "missing_headings", missing_headings)
    for source, row in zip(sources, rows, strict=True):
        row["site_absolute"] = site_absolute_hint(source, row["dangling"], stems.get(source.name, set()))
        _mark_skipped(settings, source.name, row["dangling"])
        # a site-absolute link that the site_url line explains is fixed by that line, not one by one
        _mark_near([d for d in row["dangling"] or () if not (row["site_absolute"] and _is_site_absolute(d))],
                   source_paths.get(source.name, []), titled.get(source.name))
    return {"vault": str(vault), "ok": ok, "expected_mode": f"{want_mode:04o}", "sources": rows}


def _add_links(rows: list[dict[str, Any]], count_key: str, list_key: str,
               links: Sequence[Mapping[str, Any]] | None) -> None:
    """``rows`` (of :func:`check_vault`), each given its source's ``links`` as ``row[list_key]``
    (``[{"path", "link", "file", "line", "written"}]``) and their number as ``row[count_key]`` (None when
    ``links`` is)."""
    for row in rows:
        mine = [dict(d) for d in links or () if d["path"].startswith(f"{row['name']}/")]
        row[count_key], row[list_key] = (None if links is None else len(mine)), mine


def _mark_skipped(settings: Settings, source: str, dangling: Sequence[dict[str, Any]] | None) -> None:
    """Give each dangling link whose target is a file of ``source`` that its last build skipped (a frontmatter
    typo, a bad encoding: :func:`pipeline.ingest.normalize.skipped_files`) ``"skipped": {"file", "reason"}``:
    the note exists in the source, so "create the note" would be the wrong advice."""
    from pipeline.ingest.normalize import skipped_by_name, skipped_files

    if not dangling:
        return
    skipped = skipped_files(settings, source)
    for d in dangling if skipped else ():
        target = _written_target(d.get("written") or d["link"])
        sp = (skipped_by_name(skipped, target) or skipped_by_name(skipped, f"{target}.md")) if target else None
        if sp:
            d["skipped"] = {"file": sp, "reason": skipped[sp]}


def _title_key(name: str) -> str:
    """A note's title or alias, or a link's name, as :func:`_mark_near` compares them: NFKC, case-folded."""
    return unicodedata.normalize("NFKC", name).strip().casefold()


def _mark_near(dangling: Sequence[dict[str, Any]] | None, source_paths: Sequence[str],
               titled: Mapping[str, Sequence[str]] | None = None) -> None:
    """Give a dangling link the note it probably meant, ``"did_you_mean": <its path in the source folder>``: a note
    of the source whose file has the link's name in another folder (``[x](projects/Recipes.md)`` once the note was
    moved to ``archive/``: Obsidian resolves a path that is not the note's as no note), for every link; a note whose
    file name is the closest spelling of it (:func:`pipeline.ingest.sources.closest_name`: ``[[Renamd]]``,
    ``[t](Tae.md)``) for the links :func:`format_report` names (the first :data:`DANGLING_LINES`, those to a
    skipped file first): comparing each of 1,000 names to 3,000 notes takes seconds. Before a close spelling, the
    one note whose title or alias is the link's name (``titled``: :func:`_title_key` -> the notes' paths in the
    source folder; ``[[Camping]]`` once ``Camping.md`` was renamed ``Outdoors.md``, its ``# Camping`` kept, which
    ``read Camping`` opens; before session 49, no hint). A link to a file the last build skipped has its reason
    instead."""
    from urllib.parse import unquote

    from pipeline.ingest.sources import closest_name

    if not dangling or not source_paths:
        return
    by_name: dict[str, list[str]] = {}
    for sp in source_paths:
        name = unicodedata.normalize("NFC", sp.rsplit("/", 1)[-1])
        by_name.setdefault(re.sub(r"\.md$", "", name, flags=re.IGNORECASE).casefold(), []).append(sp)
    shown = {id(d) for d in sorted(dangling, key=lambda d: not d.get("skipped"))[:DANGLING_LINES]}
    for d in dangling:
        target = unquote(str(d.get("target") or _written_target(d.get("written") or d["link"])))
        name = re.sub(r"\.md$", "", unicodedata.normalize("NFC", target).strip().rstrip("/").rsplit("/", 1)[-1],
                      flags=re.IGNORECASE).casefold()
        if d.get("skipped") or not name:
            continue
        if name in by_name:
            d["did_you_mean"] = min(by_name[name], key=lambda p: (len(p), p))
            continue
        raw = re.sub(r"\.md$", "", target.strip().rstrip("/").rsplit("/", 1)[-1], flags=re.IGNORECASE)
        if titled and len(set(titled.get(_title_key(raw), ()))) == 1:     # one note has it as its title or alias
            d["did_you_mean"] = titled[_title_key(raw)][0]
            continue
        key = closest_name(name, list(by_name)) if id(d) in shown else None
        if key:
            d["did_you_mean"] = min(by_name[key], key=lambda p: (len(p), p))


def _is_site_absolute(link: Mapping[str, Any]) -> bool:
    """Whether a dangling link (:func:`check_vault`'s ``dangling``) names its note from the site's root (``/docs/…``)."""
    return _written_target(str(link.get("written") or link["link"])).startswith("/")


def _note_stems(rel_paths: Iterable[str]) -> set[str]:
    """The notes' paths in their source folder as a link may name them: without ``.md`` (and a folder for its
    ``index.md``), case-folded."""
    out: set[str] = set()
    for rel in rel_paths:
        stem = unicodedata.normalize("NFC", rel).removesuffix(".md").casefold()
        out.add(stem)
        if stem.endswith("/index"):
            out.add(stem[: -len("/index")])
    return out


_WRITTEN_TARGET = re.compile(r"^!?\[\[([^\]|#^]*)|^!?\[[^\]]*\]\(<?([^)#>\s]*)")


def _written_target(link: str) -> str:
    """The target of a link as :func:`pipeline.service.link_problems` writes it (``[[target#h|alias]]``,
    ``![[target]]``, ``[label](target#h)``), without its heading, block or alias; "" when it is neither form.

    >>> _written_target("[[/docs/stable/a.md#Intro|a]]"), _written_target("[x](/docs/b.md#y)")
    ('/docs/stable/a.md', '/docs/b.md')
    """
    m = _WRITTEN_TARGET.match(link)
    return (m.group(1) or m.group(2) or "").strip() if m else ""


def site_absolute_hint(source: Source, dangling: Sequence[dict[str, str]], stems: set[str]
                       ) -> dict[str, Any] | None:
    """What explains a source's dangling site-absolute links (``[…](/docs/stable/x.md)``, ``[[/docs/x]]``):
    those whose path, after dropping leading segments, is the path of one of the source's notes (``stems``:
    :func:`_note_stems`). Such a link was written for the site the pages are published on, and normalize
    resolves it against the path of the source's ``site_url``
    (:func:`pipeline.ingest.normalize._LinkIndex.site_match`), which is unset or another path; a ``format:
    obsidian`` source's links are not converted at all.

    Args:
        source: the source.
        dangling: its dangling links, ``[{"path", "link"}]`` (:func:`check_vault`'s ``dangling``).
        stems: its notes' paths.

    Returns:
        None when no dangling link is so explained; else ``{"links": N (of the most common prefix),
        "prefix": "/docs", "example": "/docs/stable/…", "site_url": the suggested value
        (``https://<its site>/docs``, on the origin of the source's ``site_url`` when it has one),
        "set_format": True for a ``format: obsidian`` source}``.
    """
    from collections import Counter
    from urllib.parse import urlsplit

    prefixes: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for d in dangling:
        target = _written_target(d["link"])
        if not target.startswith("/") or target.startswith("//"):
            continue
        parts = [p for p in target.split("/") if p]
        for k in range(1, len(parts)):
            rest = unicodedata.normalize("NFC", "/".join(parts[k:])).removesuffix(".md").casefold()
            if rest in stems:
                prefix = "/" + "/".join(parts[:k])
                prefixes[prefix] += 1
                more = "/…" if k + 1 < len(parts) else ""
                examples.setdefault(prefix, "/" + "/".join(parts[: k + 1]) + more)
                break
    if not prefixes:
        return None
    prefix, n = min(prefixes.items(), key=lambda item: (-item[1], item[0]))
    url = urlsplit(source.site_url or "")
    origin = f"{url.scheme}://{url.netloc}" if url.scheme and url.netloc else "https://<its site>"
    return {"links": n, "prefix": prefix, "example": examples[prefix], "site_url": origin + prefix,
            "set_format": source.format == "obsidian"}


#: at most this many dangling links per source are named by :func:`format_report` (``--json`` has them all)
DANGLING_LINES = 10


def format_report(report: dict[str, Any]) -> list[str]:
    """The check as text lines (one table row per source, then examples of each problem, then the source's
    dangling links: the missing notes most linked (:func:`_most_linked`), then ``<source>: <file>:<line> -> <link
    as written there>``, at most :data:`DANGLING_LINES` (those to a file the last build skipped first), then a
    count of the rest; then its links to a missing heading, the same way)."""
    lines = [f"vault: {report['vault']} (notes should have mode {report['expected_mode']})",
             f"  {'source':24} {'notes':>6} {'attach.':>7} {'unresolved':>10} {'markup':>7} {'mode':>5} "
             f"{'yours':>6} {'edited':>6} {'copies':>6}"]
    for r in report["sources"]:
        lines.append(f"  {r['name']:24} {r['notes']:>6} {r['attachments_in_vault']:>7} {r['unresolved_in_source']:>10} "
                     f"{'-' if r['markup'] is None else r['markup']:>7} {r['bad_mode']:>5} {r['user_files']:>6} "
                     f"{r['edited']:>6} "
                     f"{r.get('edited_copies', 0):>6}")
    for r in report["sources"]:
        if r.get("error"):
            lines.append(f"  {r['name']}: cannot read the vault: {r['error']}")
        for kind, label in (("unresolved_in_source", "embed of a file in the source that does not resolve"),
                            ("markup", "markup outside code"), ("bad_mode", "note mode")):
            for e in r["examples"][kind]:
                lines.append(f"  {r['name']}: {label}: {e}")
        if r["unresolved_elsewhere"]:
            lines.append(f"  {r['name']}: {r['unresolved_elsewhere']} embed(s) of files that are not in the source "
                         "either (nothing to copy)")
        if r.get("dangling_links"):
            fix = "fix the link or the source's site_url, see below" if r.get("site_absolute") else \
                "create the note or fix the link"
            n_skipped = sum(1 for d in r["dangling"] if d.get("skipped"))
            also = (f"; {n_skipped} of them to a file the last build skipped, which is in the source: fix that "
                    "file") if n_skipped else ""
            lines.append(f"  {r['name']}: {r['dangling_links']} dangling link(s), to a note no source has "
                         f"({fix}{also}):")
            lines += _most_linked(r["name"], r["dangling"])
            # the links to a skipped file first (the line above tells to fix that file: name it even past the first
            # DANGLING_LINES), then the others in path order
            lines += _link_lines(r["name"], sorted(r["dangling"], key=lambda d: not d.get("skipped")),
                                 "dangling links")
            hint = r.get("site_absolute")
            if hint:
                fmt = (" and a `format:` other than obsidian (a `format: obsidian` source's links stay as "
                       "written)" if hint["set_format"] else "")
                lines.append(f"  {r['name']}: {hint['links']} of them are site-absolute ({hint['example']}) "
                             f"and match notes of this source without the '{hint['prefix']}' prefix: set "
                             f"`site_url: {hint['site_url']}`{fmt} for it in sources.yaml, so such links "
                             "resolve to its notes (README: sources.yaml)")
        if r.get("missing_heading_links"):
            lines.append(f"  {r['name']}: {r['missing_heading_links']} link(s) to a missing heading: the "
                         "note exists but has no such #heading or #^block (Obsidian opens it at the top; fix "
                         "the link or the heading):")
            lines += _link_lines(r["name"], r["missing_headings"], "links to a missing heading")
    lines.append("ok" if report["ok"] else "problems found (see above)")
    return lines


#: at most this many missing notes are named by :func:`_most_linked`
MOST_LINKED = 5


def _most_linked(source: str, links: Sequence[Mapping[str, Any]]) -> list[str]:
    """``<source>: they name N missing notes; the most linked: [[Views]] (48 notes), …``: the targets of
    ``links`` (dangling links, :func:`check_vault`'s ``dangling``) that two notes or more link to, by how many notes
    do (then by name), at most :data:`MOST_LINKED`; the notes worth creating first, which the first
    :data:`DANGLING_LINES` links, in path order, do not show in a large vault. [] when every link is named
    (no more than :data:`DANGLING_LINES`) or no missing note is linked from two notes. A target is compared as
    Obsidian compares names, case-insensitively."""
    if len(links) <= DANGLING_LINES:
        return []
    notes: dict[str, set[str]] = {}
    shown: dict[str, str] = {}
    for d in links:
        target = str(d.get("target") or d["link"])
        key = target.casefold()
        shown.setdefault(key, target)
        notes.setdefault(key, set()).add(d["path"])
    ranked = sorted((key for key in notes if len(notes[key]) > 1), key=lambda k: (-len(notes[k]), k))
    if not ranked:
        return []
    named = ", ".join(f"[[{shown[k]}]] ({len(notes[k])} notes)" for k in ranked[:MOST_LINKED])
    return [f"  {source}: they name {len(notes)} missing notes; the most linked: {named}"
            + (", …" if len(ranked) > MOST_LINKED else "")]


def _where(link: Mapping[str, Any]) -> str:
    """``file:line`` of a link of :func:`check_vault`'s lists (``file`` alone without a line; its note's vault
    path when the caller gave no file)."""
    where = link.get("file") or link["path"]
    return f"{where}:{link['line']}" if link.get("line") else where


def _skipped_note(link: Mapping[str, Any]) -> str:
    """`` (<file> is in the source, but the last build skipped it: <reason>)`` for a dangling link to a skipped
    file (:func:`_mark_skipped`), `` (did you mean <file>?)`` for one to a note probably meant (:func:`_mark_near`),
    else ""."""
    sk = link.get("skipped")
    if sk:
        return f" ({sk['file']} is in the source, but the last build skipped it: {sk['reason']})"
    return f" (did you mean {link['did_you_mean']}?)" if link.get("did_you_mean") else ""


def _link_lines(source: str, links: Sequence[dict[str, Any]], what: str) -> list[str]:
    """``<source>: <file>:<line> -> <link as written>`` (the note's file in its source and the link as the user
    wrote it there; without a line, ``<file>`` and the link as the vault has it, when the file does not have it)
    for the first :data:`DANGLING_LINES` of ``links``, then the count of the rest (``what``: their name in that
    line)."""
    lines = [f"  {source}: {_where(d)} -> {d.get('written') or d['link']}{_skipped_note(d)}"
             for d in links[:DANGLING_LINES]]
    if len(links) > DANGLING_LINES:
        lines.append(f"  {source}: … and {len(links) - DANGLING_LINES} more {what} "
                     "(`docsvault check-vault --json` lists them all)")
    return lines
