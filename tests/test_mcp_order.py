"""Tool calls of one MCP session take effect in the order they were sent, and the end of stdin waits for every
answer.

Before: ``docsvault mcp < requests.jsonl`` answered only the requests that finished before stdin ended (the SDK
cancelled the rest at EOF; exit 0, no warning), and calls sent back to back ran at once: a ``refresh`` sent after a
``save_note`` started first, and the save's own rebuild failed with "a refresh is already running". Now a stdio or
HTTP session runs its ``tools/call`` requests one at a time in arrival order (ping, tools/list are not held), and
EOF waits for the answers. The servers here run the real MCP layer over :class:`Recorder`, a fake service that
logs the order in which its tools ran (no build), so every test takes a second or two.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from pipeline.config import Settings
from pipeline.mcp_server import CallQueues, ToolFailure, VaultService
from tests.test_mcp_http import free_port

REPO = Path(__file__).resolve().parents[1]
SLOW = 0.8          # seconds a save_note of a text starting with "slow" takes
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class Recorder(VaultService):
    """The tools without a warehouse: each logs when it starts and ends (``status`` returns the log). save_note
    "rebuilds" under the build lock and refresh refuses while it is held, as the real ones do."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.log: list[str] = []
        self.saved: list[str] = []
        self._build = threading.Lock()

    def _run(self, what: str, fn: Any) -> Any:
        self.log.append(what)
        try:
            return fn()
        finally:
            self.log.append(f"{what} done")

    def save_note(self, text: str, title: str | None = None, name: str | None = None, *args: Any,
                  **kwargs: Any) -> dict[str, Any]:
        def save() -> dict[str, Any]:
            self.saved.append(str(name))
            if not self._build.acquire(blocking=False):
                return {"path": name, "searchable": False, "error": "the note is saved but the rebuild failed: a "
                                                                    "refresh is already running"}
            try:
                time.sleep(SLOW if text.startswith("slow") else 0)
            finally:
                self._build.release()
            return {"path": name, "searchable": True}

        return self._run(f"save_note {name}", save)

    def search(self, query: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self._run(f"search {query}", lambda: {"query": query, "saved": list(self.saved)})

    def refresh(self, source: str | None = None, full: bool = False, wait: float = 0) -> dict[str, Any]:
        def refresh() -> dict[str, Any]:
            if not self._build.acquire(blocking=False):
                raise ToolFailure("a refresh is already running; call refresh again when it has finished")
            self._build.release()
            return {"ok": True, "notes": list(self.saved)}

        return self._run("refresh", refresh)

    def related(self, path: str, k: int = 10) -> dict[str, Any]:
        def crash() -> dict[str, Any]:
            raise RuntimeError("boom")

        return self._run(f"related {path}", crash)

    def status(self) -> dict[str, Any]:
        return {"log": list(self.log)}


class SlowBuild(VaultService):
    """A refresh whose "build" is a child that sleeps for 120 s (in a session of its own, as the real build runs);
    ``status`` returns how the refreshes ended."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.log: list[str] = []

    def refresh(self, source: str | None = None, full: bool = False, wait: float = 0) -> dict[str, Any]:
        child = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_DFL); "
                 "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM}); time.sleep(120)")
        # -S: no site-packages scan at start-up (its .pth files), so a loaded machine does not hold the child in
        # start-up past stop_build's grace (it was killed, -9, once under load)
        self._build = subprocess.Popen([sys.executable, "-S", "-c", child], start_new_session=True)
        print(f"build started (pid {self._build.pid})", file=sys.stderr, flush=True)
        try:
            code = self._build.wait()
        finally:
            self._build = None
        self.log.append(f"refresh ended {code}")
        return {"ok": code == 0}

    def status(self) -> dict[str, Any]:
        return {"log": list(self.log)}


def main() -> None:
    """A server over :class:`Recorder`: ``stdio [DRAIN_SECONDS]`` or ``http PORT`` (run by the tests in a child),
    logging as ``docsvault mcp`` does."""
    import logging

    import uvicorn

    from pipeline.mcp_http import HttpOptions, http_app
    from pipeline.mcp_server import create_server

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="docsvault-mcp %(levelname)s %(message)s",
                        force=True)
    settings = Settings.from_env()
    if sys.argv[1] in ("stdio", "stdio-slow-build"):
        server = create_server(settings, (SlowBuild if sys.argv[1] == "stdio-slow-build" else Recorder)(settings))
        if len(sys.argv) > 2:
            server.drain_seconds = float(sys.argv[2])
        server.run("stdio")
    else:
        opts = HttpOptions(port=int(sys.argv[2]))
        uvicorn.run(http_app(settings, opts, Recorder(settings)), host=opts.host, port=opts.port, log_level="warning")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def _call(rid: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def _cancel(rid: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid}}


def _payload(reply: dict[str, Any]) -> Any:
    result = reply["result"]
    if "structuredContent" in result:
        data = result["structuredContent"]
        return data.get("result", data) if set(data) == {"result"} else data
    return result["content"][0]["text"]


def _stdio(messages: list[dict[str, Any]], *args: str) -> tuple[list[dict[str, Any]], str, int, float]:
    """Write every message to a fake server's stdin at once and close it: (the replies in the order written, the
    stderr, the exit code, the seconds it ran)."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", "from tests.test_mcp_order import main; main()", "stdio", *args],
                          input="".join(json.dumps(m) + "\n" for m in messages), capture_output=True, text=True,
                          cwd=REPO, env=_env(), timeout=60, check=False)
    return ([json.loads(line) for line in proc.stdout.splitlines()], proc.stderr, proc.returncode,
            time.monotonic() - started)


# ---------------------------------------------------------------- the queue itself
def test_calls_run_in_ticket_order_not_in_task_start_order() -> None:
    """Tickets taken 1, 2, 3 at arrival; the tasks start 3, 2, 1: they run 1, 2, 3. A failing call and a call
    cancelled while it waits free their turn; a dropped ticket (a cancelled call that never started) holds no one."""
    queues = CallQueues()
    ran: list[Any] = []

    async def call(rid: Any, fail: bool = False) -> None:
        async with queues.turn("s", rid):
            ran.append(rid)
            await anyio.sleep(0.01)
            if fail:
                raise RuntimeError("boom")

    async def failing(rid: Any) -> None:
        with pytest.raises(RuntimeError):
            await call(rid, fail=True)

    async def scenario() -> None:
        for rid in (1, 2, 3, 4, 5, 6):
            queues.admit("s", rid)
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, 6)
            tg.start_soon(call, 5)
            with anyio.CancelScope() as waiting:
                waiting.cancel()            # cancelled while it waits: never runs, and frees its turn
                await call(4)
            assert queues.drop("s", 3)      # never started (e.g. notifications/cancelled): dropped
            assert not queues.drop("s", 3)
            tg.start_soon(call, 2)
            tg.start_soon(failing, 1)
        assert queues.pending("s") == 0
        async with queues.turn("s", "new"):         # a call without a ticket takes one when it starts
            ran.append("new")

    anyio.run(scenario)
    assert ran == [1, 2, 5, 6, "new"]
    assert queues._queues == {}          # an idle session keeps nothing


# ---------------------------------------------------------------- stdio
def test_stdio_answers_every_request_before_eof_and_runs_tool_calls_in_order(tiny_env: Path) -> None:
    """All 9 requests answered after stdin closed (before: only the fast ones); save_note, search, refresh sent
    back to back take effect in that order; ping and tools/list are answered while the slow save runs; a crashing
    call does not stop the next."""
    messages = [INIT, INITIALIZED,
                _call(2, "save_note", {"text": "slow note", "name": "a", "source": "mynotes"}),
                _call(3, "search", {"query": "a"}), _call(4, "refresh", {}),
                {"jsonrpc": "2.0", "id": 5, "method": "ping"}, {"jsonrpc": "2.0", "id": 6, "method": "tools/list"},
                _call(7, "related", {"path": "x.md"}), _call(8, "find", {}), _call(9, "status", {})]
    replies, err, code, _ = _stdio(messages)
    ids = [r["id"] for r in replies]
    assert code == 0 and sorted(ids) == list(range(1, 10)), (ids, err)
    assert ids.index(5) < ids.index(2) and ids.index(6) < ids.index(2)         # not held behind the slow call
    assert [i for i in ids if i not in (1, 5, 6)] == [2, 3, 4, 7, 8, 9]
    by_id = {r["id"]: r for r in replies}
    assert _payload(by_id[2]) == {"path": "a", "searchable": True}
    assert _payload(by_id[3]) == {"query": "a", "saved": ["a"]}
    assert _payload(by_id[4]) == {"ok": True, "notes": ["a"]}
    assert by_id[7]["result"]["isError"] and _payload(by_id[7]) == ("related: internal error; the server's log "
                                                                    "(stderr) has the details")
    assert by_id[8]["result"]["isError"]
    assert _payload(by_id[9]) == {"log": ["save_note a", "save_note a done", "search a", "search a done", "refresh",
                                          "refresh done", "related x.md", "related x.md done"]}
    assert "stdin closed: answering the " in err


def test_a_cancelled_queued_call_never_runs_and_holds_no_one(tiny_env: Path) -> None:
    messages = [INIT, INITIALIZED, _call(2, "save_note", {"text": "slow note", "name": "a"}),
                _call(3, "search", {"query": "a"}), _cancel(3), _call(4, "status", {})]
    replies, err, code, seconds = _stdio(messages)
    assert code == 0 and [r["id"] for r in replies] == [1, 2, 4], err          # a cancelled request: no answer
    assert _payload(replies[2]) == {"log": ["save_note a", "save_note a done"]}
    assert seconds < 20


def test_a_cancelled_refresh_stops_its_build_and_the_next_call_runs(tiny_env: Path) -> None:
    """Before session 46 a client that cancelled a running ``refresh`` (or ``save_note``) left its build running on:
    the tool's worker thread cannot be cancelled, so the build ran to its end (minutes for a ``full`` refresh) and
    the session's next call (a search) waited behind it; now the build is stopped (SIGTERM, -15 here) at the cancel
    and the next call runs at once. The fake build sleeps 120 s: without the stop, this test's read times out."""
    proc = subprocess.Popen([sys.executable, "-c", "from tests.test_mcp_order import main; main()", "stdio-slow-build"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env=_env())
    try:
        for m in (INIT, INITIALIZED, _call(2, "refresh", {})):
            proc.stdin.write(json.dumps(m) + "\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        while not (line := proc.stderr.readline()).startswith("build started"):
            assert line, "the server ended before the refresh started its build"
        out, err = proc.communicate("".join(json.dumps(m) + "\n" for m in (_cancel(2), _call(3, "status", {}))),
                                    timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    replies = [json.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in replies] == [3], err                     # a cancelled request: no answer
    # stopped: by SIGTERM (-15), or by the SIGKILL stop_build sends when the child has not ended 10 s after it (seen
    # once in a full suite on a loaded machine)
    assert _payload(replies[0]) in ({"log": ["refresh ended -15"]}, {"log": ["refresh ended -9"]})
    assert "refresh was cancelled by the client: stopped its build (pid " in err
    assert proc.returncode == 0


def test_eof_gives_up_on_a_call_without_an_answer_after_the_bound(tiny_env: Path) -> None:
    """The bound (refresh's time bound + a margin; 0.3 s here) counts from EOF and from each answer; a call still
    running then is named on stderr and stopped unanswered."""
    messages = [INIT, INITIALIZED, _call(2, "save_note", {"text": "slow note", "name": "a"})]
    replies, err, code, _ = _stdio(messages, "0.3")
    assert code == 0 and [r["id"] for r in replies] == [1]
    assert ("stdin closed: 1 request(s) still running after 0.3 s without an answer (id 2); stopping them "
            "unanswered") in err


def test_a_client_that_closed_stdout_gets_no_traceback(tiny_env: Path) -> None:
    """stdin and stdout closed while a call runs: its answer cannot be written; one warning, exit 0 (not a
    BrokenPipeError traceback and exit 1)."""
    proc = subprocess.Popen([sys.executable, "-c", "from tests.test_mcp_order import main; main()", "stdio"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env=_env())
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        for message in (INIT, INITIALIZED, _call(2, "save_note", {"text": "slow note", "name": "a"})):
            proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        time.sleep(SLOW / 4)                # the save is running
        proc.stdin.close()
        proc.stdout.close()
        assert proc.wait(timeout=30) == 0
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "stdout was closed by the client: answers can no longer be delivered; exiting" in err
    assert "Traceback" not in err


def test_docsvault_mcp_answers_a_file_of_requests(built_tiny_env: Path) -> None:
    """The user's run: ``docsvault mcp < requests.jsonl`` over a real warehouse answers every request, each once,
    the tool calls in the order sent."""
    messages = [INIT, INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                _call(3, "search", {"query": "water bird in the pond", "k": 3}), _call(4, "read", {"path": "Ducks.md"}),
                _call(5, "related", {"path": "tiny/Home.md"}), _call(6, "status", {}),
                _call(7, "search", {"query": "install the tool on windows"}), _call(8, "read", {"path": "../x"}),
                _call(9, "search", {}), _call(10, "find", {}), {"jsonrpc": "2.0", "id": 11, "method": "tools/call"},
                _call(12, "read", {"path": "tiny/Ducks.md", "page": 9}), {"jsonrpc": "2.0", "id": 13, "method": "ping"}]
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "mcp"], capture_output=True, text=True, cwd=REPO,
                          input="".join(json.dumps(m) + "\n" for m in messages), env=_env(), timeout=120, check=False)
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    ids = [r["id"] for r in replies]
    assert proc.returncode == 0 and sorted(ids) == list(range(1, 14)), (ids, proc.stderr)
    assert [i for i in ids if i not in (1, 2, 11, 13)] == [3, 4, 5, 6, 7, 8, 9, 10, 12]
    by_id = {r["id"]: r for r in replies}
    assert _payload(by_id[3])["hits"][0]["path"] == "tiny/Ducks.md"
    assert _payload(by_id[4])["path"] == "tiny/Ducks.md" and _payload(by_id[6])["sources"][0]["name"] == "tiny"
    assert [by_id[i]["result"]["isError"] for i in (8, 9, 10, 12)] == [True] * 4
    assert by_id[11]["error"]["code"] == -32602


# ---------------------------------------------------------------- HTTP
def test_a_post_body_takes_tickets_for_its_tool_calls() -> None:
    from pipeline.mcp_http import note_arrival

    queues = CallQueues()

    async def scenario() -> list[Any]:
        return [note_arrival(queues, "k", json.dumps(_call(1, "status", {})).encode()),
                note_arrival(queues, "k", json.dumps(_call(2, "status", {})).encode()),
                note_arrival(queues, "k", json.dumps(_cancel("2")).encode()),      # a stringified id still matches
                note_arrival(queues, "k", json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"}).encode()),
                note_arrival(queues, "k", b"not json"), queues.pending("k")]

    assert anyio.run(scenario) == [[1], [2], [], [], [], 1]


def _post(url: str, body: dict[str, Any], session: str | None,
          accept: str = "application/json, text/event-stream") -> tuple[int, Any, str | None]:
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json", "Accept": accept, **({"Mcp-Session-Id": session} if session else {})}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, text, sid = resp.status, resp.read().decode(), resp.headers.get("mcp-session-id")
    except urllib.error.HTTPError as exc:
        status, text, sid = exc.code, exc.read().decode(), None
    data = next((ln[len("data: "):] for ln in text.splitlines() if ln.startswith("data: ") and ln[6:].strip()), text)
    return status, (json.loads(data) if data.strip() else None), sid or session


def test_http_session_runs_tool_calls_in_arrival_order(tiny_env: Path) -> None:
    """Over streamable HTTP, within one MCP session: a save_note, then a search POSTed while it runs, then a
    refresh: they take effect in that order; a ping is answered at once meanwhile; a tools/call the transport
    refuses (406) holds no later call."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with open(tiny_env / "server.log", "wb") as errlog:
        proc = subprocess.Popen([sys.executable, "-c", "from tests.test_mcp_order import main; main()", "http",
                                 str(port)], cwd=REPO, env=_env(), stdin=subprocess.DEVNULL, stdout=errlog,
                                stderr=subprocess.STDOUT)
    try:
        _wait_for_port(port, proc, tiny_env / "server.log")
        status, reply, session = _post(url, INIT, None)
        assert status == 200 and session, reply
        assert _post(url, INITIALIZED, session)[0] == 202
        assert _post(url, _call(9, "status", {}), session, accept="text/plain")[0] == 406     # refused: dropped
        replies: dict[int, Any] = {}

        def send(message: dict[str, Any]) -> None:
            replies[message["id"]] = _post(url, message, session)[1]

        threads = [threading.Thread(target=send, args=(m,)) for m in (
            _call(2, "save_note", {"text": "slow note", "name": "a"}), _call(3, "search", {"query": "a"}),
            _call(4, "refresh", {}))]
        for t in threads:
            t.start()
            time.sleep(0.15)                # arrival order 2, 3, 4 (each POST is on the server before the next)
        started = time.monotonic()
        pong = _post(url, {"jsonrpc": "2.0", "id": 5, "method": "ping"}, session)[1]
        ping_seconds = time.monotonic() - started
        for t in threads:
            t.join(timeout=30)
        final = _post(url, _call(6, "status", {}), session)[1]
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert pong == {"jsonrpc": "2.0", "id": 5, "result": {}} and ping_seconds < SLOW / 2
    assert _payload(replies[2]) == {"path": "a", "searchable": True}
    assert _payload(replies[3]) == {"query": "a", "saved": ["a"]}
    assert _payload(replies[4]) == {"ok": True, "notes": ["a"]}
    assert _payload(final) == {"log": ["save_note a", "save_note a done", "search a", "search a done", "refresh",
                                       "refresh done"]}


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path) -> None:
    import socket

    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, log.read_text()
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.1)
