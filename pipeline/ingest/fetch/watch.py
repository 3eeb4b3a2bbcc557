"""Cheap upstream-change checks, one per source, for the Dagster sensor (no checkout, no page downloads).

- git: one ``git ls-remote`` of the ref vs the commit recorded in ``fetch.json``; an edited ``ref`` or ``paths``
  counts as a change, with its own token (:func:`_git_token`).
- llms_txt: conditional GET of the llms.txt (ETag / Last-Modified recorded by the last fetch); a 200 is compared by
  content hash. Pages that changed behind an unchanged llms.txt are left to the daily refresh schedule.
- html: the same on the sitemap when one is configured, else on the start page.
- local: the listing hash (paths, sizes, mtimes) vs the recorded revision.
- any kind: the source's entry in sources.yaml vs the one its last fetch recorded (:func:`config_edit`).

A source never fetched counts as changed, with a token of its configuration (for a local source: its listing hash,
once its folder exists). The sensor requests a token once, so a source whose first run failed (a mistyped git URL)
is requested again when its entry in sources.yaml changes (the URL fixed), and a local one when its folder appears
or changes; before, every never-fetched source had the same token and was never requested again. A source a
build removed (it left sources.yaml) and that is back unchanged has nothing built again: its token also
carries the time of that removal (``<data>/state/.removed.json``), so it is requested again, once per removal.
An unreachable source is reported (``error``) and not changed: it is the build's job to report failures, the
sensor only asks for work it can do.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pipeline.common import artifacts
from pipeline.common.errors import FetchError
from pipeline.config import Settings
from pipeline.ingest.fetch.base import read_state, strategy_url
from pipeline.models import Source


@dataclass(frozen=True)
class UpstreamCheck:
    """Result of one check. ``token`` identifies the upstream version seen (commit id, hash, ETag); "" if unknown."""

    source: str
    changed: bool
    token: str
    detail: str
    error: str | None = None
    #: nothing recorded for the source (no ``fetch.json``): changed, and ``token`` names its configuration
    never_fetched: bool = False
    #: the last fetch this check compared with: its recorded revision and time (``<revision>|<fetched_at>``), ""
    #: when never fetched and for an http source; the sensor keys a version seen after it by it, so a version that
    #: comes back (a commit force-pushed back) is requested again (:func:`pipeline.defs.automation.moved_token`)
    since: str = ""


def check_upstream(source: Source, settings: Settings) -> UpstreamCheck:
    """Has ``source`` moved upstream since its last recorded fetch? (see module doc; never raises FetchError)."""
    from dataclasses import replace

    state = read_state(source, settings)
    try:
        if state is None:
            return _never_fetched(source, settings)
        if source.kind == "git":
            check = _check_git(source, state)
        elif source.kind == "local":
            check = _check_local(source, settings, state)
        else:
            check = _check_http(source, state)
    except FetchError as exc:
        return UpstreamCheck(source.name, False, "", "check failed", error=str(exc))
    if source.kind not in ("git", "local"):
        # an http check may say "changed" after every fetch (a sitemap without an ETag: no recorded hash to
        # compare with): keyed by each fetch, such a source would be requested on every tick
        return check
    return replace(check, since=f"{state.get('revision') or ''}|{state.get('fetched_at') or ''}")


def _never_fetched(source: Source, settings: Settings) -> UpstreamCheck:
    """A source with nothing fetched: changed; its token is its configuration (a local one: its listing, so it
    is requested again when its folder appears or changes) and, when a build removed it before, that removal's
    time (raises FetchError: a local folder that does not exist)."""
    if source.kind == "local":
        token = _check_local(source, settings, {}).token
    else:
        token = f"never-fetched:{config_token(source)}"
    removed = artifacts.removed_at(settings, source.name)
    if removed is None:
        return UpstreamCheck(source.name, True, token, "never fetched", never_fetched=True)
    readded = hashlib.sha256(f"{token}|{removed}".encode()).hexdigest()[:24]
    detail = f"nothing fetched since it was removed from sources.yaml at {removed}"
    return UpstreamCheck(source.name, True, f"re-added:{readded}", detail, never_fetched=True)


def config_token(source: Source) -> str:
    """16 hex digits of ``source``'s whole configuration (its sources.yaml entry as loaded); the fetch stage records
    it in the source's state as ``config`` (:func:`config_edit`)."""
    return hashlib.sha256(repr(source).encode("utf-8")).hexdigest()[:16]


def config_edit(source: Source, state: dict) -> str | None:
    """A token for an edit of ``source``'s entry in sources.yaml since its last successful fetch (``state``: the
    source's state, :func:`pipeline.common.artifacts.load_state`, whose ``config`` the fetch stage recorded), None
    when the entry is the one fetched with (or nothing was recorded: a data dir of an older version). Any edit
    counts (``format``, ``include``/``exclude``, ``site_url``, ``language``...: what normalize, the vault, chunk and
    embed read), not only the ``ref``/``paths`` a git check sees. The token carries the last fetch's time, so each
    edit is requested once, and an edit undone after a run is requested again."""
    recorded = state.get("config")
    current = config_token(source)
    if not recorded or recorded == current:
        return None
    return "config:" + hashlib.sha256(f"{current}|{state.get('fetched_at')}".encode()).hexdigest()[:16]


def _check_git(source: Source, state: dict) -> UpstreamCheck:
    from pipeline.ingest.fetch.git import _GitRunner, _remote_commit, is_commit_id

    recorded = str(state.get("revision") or "")
    same_config = state.get("ref") == source.ref and list(state.get("paths") or []) == list(source.paths)
    if is_commit_id(source.ref):
        token = _git_token(source, state, str(source.ref), same_config)
        return UpstreamCheck(source.name, recorded != source.ref or not same_config, token, "pinned commit")
    remote = _remote_commit(_GitRunner(source), source.ref)
    changed = remote != recorded or not same_config
    detail = f"remote {remote[:12]} vs recorded {recorded[:12]}" + ("" if same_config else "; ref or paths edited")
    return UpstreamCheck(source.name, changed, _git_token(source, state, remote, same_config), detail)


def _git_token(source: Source, state: dict, commit: str, same_config: bool) -> str:
    """The commit id; after an edit of the source's ``ref`` or ``paths`` in sources.yaml, the commit's first 12
    digits with a hash of the entry and of the last fetch's time, so the sensor requests the edit even when the
    commit was requested before (it kept the commit as the source's token and skipped it), and once per edit."""
    if same_config:
        return commit
    edit = hashlib.sha256(f"{config_token(source)}|{state.get('fetched_at')}".encode()).hexdigest()[:16]
    return f"{commit[:12]}+edit:{edit}"


def _check_local(source: Source, settings: Settings, state: dict) -> UpstreamCheck:
    from pipeline.ingest.fetch.base import select_paths
    from pipeline.ingest.fetch.local import ContentHashes, list_local, listing_revision, stat_notes

    found = list_local(source)                  # the fetch's own listing and revision
    stamps = stat_notes(source, found.listing, select_paths(source, found.listing), [])
    token = listing_revision(source, found.listing, stamps, ContentHashes.of(source, settings), found.bad_notes)
    return UpstreamCheck(source.name, token != state.get("revision"), token, "listing hash")


def _check_http(source: Source, state: dict) -> UpstreamCheck:
    from pipeline.ingest.fetch.html import make_client
    from pipeline.ingest.fetch.http import host_of
    from pipeline.ingest.fetch.pages import sha256

    strategy = str(state.get("strategy") or (source.strategies or (source.kind,))[0])
    if strategy == "llms_txt":
        entry = state.get("index") or {}
        url = entry.get("url") or strategy_url(source, "llms_txt")
        etag, modified, digest = entry.get("etag"), entry.get("last_modified"), entry.get("sha256")
    else:
        start = state.get("start_url") or strategy_url(source, "html") or ""
        page = (state.get("pages") or {}).get(start.split("#")[0]) or {}
        url = start
        etag, modified, digest = page.get("etag"), page.get("last_modified"), None
        if source.sitemap and source.sitemap != "auto":
            url, etag, modified = source.sitemap, None, None
        digest = page.get("sha256") if url == start else None
    assert url
    client = make_client(source, {host_of(url), *source.allowed_hosts})
    try:
        resp = client.get(url, etag=etag, last_modified=modified)
    finally:
        client.close()
    if resp.not_modified:
        return UpstreamCheck(source.name, False, etag or modified or "", f"{url}: 304 not modified")
    if strategy == "html" and url == state.get("start_url"):
        from pipeline.ingest.fetch.htmlmd import html_to_markdown

        token = sha256(html_to_markdown(resp.body, resp.final_url).markdown.encode("utf-8"))
    else:
        token = sha256(resp.body)
    changed = digest is None or token != digest
    return UpstreamCheck(source.name, changed, token, f"{url}: content hash {'differs' if changed else 'same'}")
