"""Files that carry one stage's output to the next: JSON Lines of notes and chunks, per-source state.

Every write is atomic (temp file in the same folder + os.replace), so a killed build leaves the previous file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from pipeline.config import Settings
from pipeline.models import Chunk, Note

_UMASK_LOCK = threading.Lock()


def file_mode() -> int:
    """The mode a new file gets under the process umask (0o644 under umask 0o022): ``0o666 & ~umask``.

    ``tempfile.mkstemp`` creates its files 0o600; an atomic writer must set this mode before the rename so that
    Obsidian Sync, git, backup tools and other users see the files as they would any file the user wrote.
    """
    with _UMASK_LOCK:                  # reading the umask means setting it: keep the window closed to threads
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write bytes to ``path`` through a temp file in the same folder and os.replace (crash-safe); the file gets
    the umask's mode (:func:`file_mode`, 0o644 under umask 0o022), not mkstemp's 0o600, unless ``mode`` is given
    (e.g. 0o600 for a file only its user may read)."""
    write_atomic_with(path, lambda fh: fh.write(data), mode=mode)


def write_atomic_with(path: Path, fill: Callable[[BinaryIO], object], *, exclusive: bool = False,
                      mode: int | None = None, before_replace: Callable[[], object] | None = None) -> None:
    """Like :func:`write_atomic`, the bytes written by ``fill(file)`` (e.g. a copy of another file, ``np.savez``).

    ``exclusive``: never replace an existing ``path`` (the temp file is hard-linked to it, so of two writers
    racing for one name, one gets ``FileExistsError``); on a filesystem without hard links, a plain replace.
    ``before_replace``: called once the new bytes are on disk, right before they take ``path`` (the vault judges
    the file there then: an edit saved while the new version was written is not replaced unseen).

    Raises:
        FileExistsError: ``exclusive`` and ``path`` exists (nothing written).
        OSError: the folder or the file cannot be written (the temp file is removed); one that names no file (a
            full disk: ``[Errno 28] No space left on device``) names ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode() if mode is None else mode)
        with os.fdopen(fd, "wb") as fh:
            fill(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if before_replace is not None:
            before_replace()
        if exclusive:
            _link_new(tmp, path)
        else:
            os.replace(tmp, path)
    except OSError as exc:
        if exc.filename is None:    # a write or fsync that failed: the stage's error line names the file
            exc.filename = str(path)
        raise
    finally:
        Path(tmp).unlink(missing_ok=True)       # gone after a replace; left behind by a link or a failure


def _link_new(tmp: str, path: Path) -> None:
    try:
        os.link(tmp, path)          # atomic, and never overwrites a file another writer placed there
    except FileExistsError:
        raise
    except OSError:                 # a filesystem without hard links
        os.replace(tmp, path)


def move_atomic(written: Path, path: Path) -> None:
    """Put a finished file that a library wrote (an exported model, a tokenizer) at ``path``: fsync, then
    os.replace (``written`` must be on the same filesystem, e.g. a temp folder inside ``path``'s folder)."""
    with open(written, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(written, path)


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> int:
    """Write records as JSON Lines atomically; returns the number of records."""
    lines = [json.dumps(r, ensure_ascii=False) for r in records]   # key order kept (frontmatter order matters)
    write_lines(path, lines)
    return len(lines)


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def notes_path(settings: Settings, source: str) -> Path:
    return settings.notes_dir / f"{source}.jsonl"


def chunks_path(settings: Settings, source: str) -> Path:
    return settings.chunks_dir / f"{source}.jsonl"


def save_notes(settings: Settings, source: str, notes: Iterable[Note]) -> int:
    return write_jsonl(
        notes_path(settings, source),
        (
            {"source": n.source, "source_path": n.source_path, "rel_path": n.rel_path, "title": n.title,
             "frontmatter": n.frontmatter, "body": n.body}
            for n in notes
        ),
    )


def load_notes(settings: Settings, source: str) -> list[Note]:
    path = notes_path(settings, source)
    return [Note(**r) for r in read_jsonl(path)] if path.exists() else []


def chunk_record(c: Chunk) -> dict[str, Any]:
    """The JSON record of a chunk in ``<data>/chunks/<source>.jsonl`` (key order fixed: :data:`CHUNK_LINE` reads
    it)."""
    return {"chunk_id": c.chunk_id, "note_id": c.note_id, "source": c.source, "ordinal": c.ordinal,
            "heading_path": list(c.heading_path), "breadcrumb": c.breadcrumb, "text": c.text, "language": c.language}


def chunk_line(c: Chunk) -> str:
    """One line of the chunks file (without the newline): ``json.dumps(chunk_record(c), ensure_ascii=False)``."""
    return json.dumps(chunk_record(c), ensure_ascii=False)


def write_lines(path: Path, lines: Sequence[str]) -> str:
    """Write JSON Lines already encoded (one JSON text per item, no newline in it) atomically, as
    :func:`write_jsonl` writes their records; returns the sha256 hex of the bytes written (what
    ``file_sha(path)`` reads back)."""
    data = ("\n".join(lines) + ("\n" if lines else "")).encode("utf-8")
    write_atomic(path, data)
    return hashlib.sha256(data).hexdigest()


#: a chunks-file line as :func:`chunk_line` writes it: groups note id, ordinal, language (JSON strings without
#: escapes, so the text between the quotes is the value)
CHUNK_LINE = re.compile(r'\{"chunk_id": "[^"\\]*", "note_id": "([^"\\]*)", "source": "(?:[^"\\]|\\.)*", '
                        r'"ordinal": ([0-9]+), "heading_path": \[.*, "language": "([^"\\]*)"\}')


class ChunkLine(NamedTuple):
    """A chunk as a line of the chunks file: its note id, ordinal and language parsed, the rest kept as written."""

    note_id: str
    ordinal: int
    language: str
    line: str


def read_chunk_lines(path: Path, sha: str | None) -> list[ChunkLine] | None:
    """The lines of the chunks file ``path`` without decoding their JSON, when the file's sha256 is ``sha`` (what
    the last chunk stage recorded: it wrote every line with :func:`chunk_line`) and every line has that form
    (:data:`CHUNK_LINE`); else None (read it with :func:`load_chunks`). A line kept this way is byte for byte what
    :func:`chunk_line` makes of the chunk :func:`load_chunks` reads from it.

    Raises:
        OSError: the file cannot be read.
    """
    data = path.read_bytes()
    if sha is None or hashlib.sha256(data).hexdigest() != sha:
        return None
    out = []
    match = CHUNK_LINE.fullmatch
    for line in data.decode("utf-8").split("\n"):
        if not line.strip():
            continue
        m = match(line)
        if m is None:
            return None
        out.append(ChunkLine(m.group(1), int(m.group(2)), m.group(3), line))
    return out


def load_chunks(settings: Settings, source: str) -> list[Chunk]:
    path = chunks_path(settings, source)
    if not path.exists():
        return []
    return [Chunk(**{**r, "heading_path": tuple(r["heading_path"])}) for r in read_jsonl(path)]


def state_path(settings: Settings, source: str) -> Path:
    return settings.state_dir / f"{source}.json"


def load_state(settings: Settings, source: str) -> dict[str, Any]:
    """<data>/state/<source>.json as a dict; {} when missing, unreadable, not JSON or no JSON object (``null``, a
    list: a hand edit), so that a caller's ``.get`` and :func:`update_state` never fail on it."""
    path = state_path(settings, source)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def update_state(settings: Settings, source: str, **values: Any) -> dict[str, Any]:
    """Merge values into <data>/state/<source>.json (last build per source: status, counts, times)."""
    state = load_state(settings, source)
    state.update(values)
    write_state(settings, source, state)
    return state


def write_state(settings: Settings, source: str, state: Mapping[str, Any]) -> None:
    """Replace <data>/state/<source>.json with ``state`` (atomically; raises OSError when it cannot be written)."""
    write_atomic(state_path(settings, source), json.dumps(state, ensure_ascii=False, indent=1, sort_keys=True).encode())


#: ``<data>/state/.removed.json``: source name -> when a build last removed it (ISO 8601 UTC) because it left
#: sources.yaml; kept when the source comes back (a name cannot start with a dot, so it is no source's state)
REMOVED_STATE = ".removed"


def record_removed(settings: Settings, names: Iterable[str], at: str) -> None:
    """Record that the sources ``names`` were removed at ``at`` (see :data:`REMOVED_STATE`)."""
    names = list(names)
    if names:
        update_state(settings, REMOVED_STATE, **{n: at for n in names})


def removed_at(settings: Settings, source: str) -> str | None:
    """When a build last removed ``source`` (ISO 8601 UTC), None if never (see :data:`REMOVED_STATE`)."""
    value = load_state(settings, REMOVED_STATE).get(source)
    return str(value) if value else None


#: ``<data>/state/.upstream.json``: source name -> ``{"error", "since"}`` while the ``upstream_change`` sensor cannot
#: check the source's upstream (a deleted branch, a moved repository, a site down): since when (ISO 8601 UTC, the
#: first failing tick) and the last tick's error; ``docsvault status`` shows it
UPSTREAM_STATE = ".upstream"


def record_upstream_checks(settings: Settings, failed: dict[str, str], answered: Iterable[str], at: str,
                           sources: Iterable[str]) -> None:
    """Record the sensor tick's upstream checks (see :data:`UPSTREAM_STATE`): ``failed`` (source -> error) is kept
    with the time its failure began (``at`` for a new one), ``answered`` (sources whose upstream answered) and
    names not in ``sources`` (sources.yaml's) are dropped, any other entry stays. Written only when that changes
    anything; a folder that cannot be written is left as it is, with a warning (the tick goes on)."""
    old = load_state(settings, UPSTREAM_STATE)
    drop = set(answered) | set(failed)
    known = set(sources)
    new = {k: v for k, v in old.items() if k not in drop and k in known}
    for name, error in failed.items():
        was = old.get(name)
        since = was.get("since") if isinstance(was, dict) and was.get("since") else at
        new[name] = {"error": error, "since": since}
    if new == old:
        return
    try:
        write_state(settings, UPSTREAM_STATE, new)
    except OSError as exc:      # a data folder this process may only read: the tick goes on, status cannot tell
        import logging

        logging.getLogger("docsvault").warning(
            "cannot record the sensor's upstream checks in %s (%s): `docsvault status` will not name a source whose "
            "upstream cannot be checked", state_path(settings, UPSTREAM_STATE), exc.strerror or exc)


def upstream_check_failure(settings: Settings, source: str) -> dict[str, str] | None:
    """``{"error", "since"}`` while the sensor cannot check ``source``'s upstream, else None (:data:`UPSTREAM_STATE`)."""
    value = load_state(settings, UPSTREAM_STATE).get(source)
    return {"error": str(value.get("error")), "since": str(value.get("since"))} if isinstance(value, dict) else None


#: ``<data>/state/.sensor.json``: the Dagster instance whose ``upstream_change`` sensor last ticked over this data
#: folder (``instance``: its DAGSTER_HOME), the process that evaluated the tick (``host``, ``pid``), when (``at``,
#: seconds since the epoch; ``at_iso``) and the folder's inode (``folder``: a copy of the data folder has another,
#: a shared volume the same on every host)
SENSOR_STATE = ".sensor"


#: the longest a sensor's record holds a data folder after its last tick (seconds), whatever its ``live`` says
MAX_SENSOR_LIVE_S = 86_400.0


def claim_sensor(settings: Settings, instance: str, live_seconds: float, now: float, storage: str = ""
                 ) -> dict[str, Any] | None:
    """Record that the sensor of ``instance`` ticks over ``settings.data_dir`` now, unless the sensor of another
    instance does: one whose last tick (:data:`SENSOR_STATE`) is younger than ``live_seconds``, or than the
    holder's own window (``live`` in its record, at most :data:`MAX_SENSOR_LIVE_S`) when longer, and whose process
    is not known to be gone (on this host and in this pid namespace: its pid is not alive), in this very folder
    (not a record copied along with the data folder to another disk or machine: its ``folder`` inode differs).
    Two daemons over one data folder (two DAGSTER_HOMEs) requested every change twice and each UI showed only
    its own runs.

    A record dated more than that window after ``now`` (its host's clock is that far ahead) holds nothing.
    An instance is its run storage's id (``storage``, Dagster's ``get_run_storage_id``: one for every host of a
    Postgres instance, another for each other instance even at the same DAGSTER_HOME path) when both records
    have one, else its DAGSTER_HOME (``instance``).

    The record is read and written under an exclusive ``flock`` of ``<data>/state`` itself (no lock file: a
    read-only folder is locked too), so two sensors ticking at the same moment see each other's claim: both read
    no holder and both claimed the folder for that tick before.

    Returns:
        The other instance's record (nothing written) while it holds the folder, else None (this tick recorded,
        unless the folder cannot be written: then this tick holds nothing, and goes on).
    """
    try:
        settings.state_dir.mkdir(parents=True, exist_ok=True)    # the record goes there: the folder's inode is final
    except OSError:
        pass
    with _folder_flock(settings.state_dir):
        return _claim_sensor(settings, instance, live_seconds, now, storage)


@contextmanager
def _folder_flock(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` of a folder while the block runs; no lock where the folder cannot be opened."""
    import fcntl

    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:              # a file system without flock (ENOLCK): the claim goes on unlocked, as before
            pass
        yield
    finally:
        os.close(fd)                 # releases the lock


def _claim_sensor(settings: Settings, instance: str, live_seconds: float, now: float, storage: str
                  ) -> dict[str, Any] | None:
    """:func:`claim_sensor` under its lock."""
    import socket
    from datetime import UTC, datetime

    from pipeline.common.lock import pid_alive

    other = load_state(settings, SENSOR_STATE)
    host = socket.gethostname()
    try:
        pidns = os.readlink("/proc/self/ns/pid")        # 'pid:[4026531836]'; "" where there is no such file
    except OSError:
        pidns = ""
    try:
        folder = settings.data_dir.stat().st_ino
    except OSError:
        folder = 0
    same = other.get("storage") == storage if storage and other.get("storage") else other.get("instance") == instance
    if other.get("instance") and not same and other.get("folder") == folder:
        try:                 # the holder's own window (its interval may be longer than this sensor's), a day at most
            live = max(live_seconds, min(float(other.get("live") or 0), MAX_SENSOR_LIVE_S))
        except (TypeError, ValueError):
            live = live_seconds
        try:
            age = now - float(other.get("at") or 0)
        except (TypeError, ValueError):
            age = live
        try:
            pid = int(other.get("pid") or 0)
        except (TypeError, ValueError):
            pid = 0
        # its pid is looked up only among its own processes: this host's, in this pid namespace (two containers
        # that share the host name, network_mode: host, see none of each other's processes)
        gone = other.get("host") == host and other.get("pidns", pidns) == pidns and not pid_alive(pid)
        # a tick dated more than live_seconds ahead (another host's clock far ahead) would hold the folder for as
        # long as the skew once that daemon stops: it holds nothing
        if -live < age < live and not gone:
            return other
    try:
        update_state(settings, SENSOR_STATE, instance=instance, storage=storage, host=host, pid=os.getpid(),
                     pidns=pidns, at=now, live=live_seconds, folder=folder,
                     at_iso=datetime.fromtimestamp(now, UTC).replace(microsecond=0).isoformat())
    except OSError as exc:   # a data folder this process may only read (the runs write it): the tick goes on
        import logging

        logging.getLogger("docsvault").warning(
            "cannot record the sensor's tick in %s (%s): a second daemon over this data folder is not held off",
            state_path(settings, SENSOR_STATE), exc.strerror or exc)
    return None
