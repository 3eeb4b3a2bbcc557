"""Load test of `docsvault mcp --http`: N concurrent MCP clients over streamable HTTP on loopback, each opening its own
session and calling `search` back to back for a fixed time. Prints errors, calls/s and latency p50/p95.

    python bench/mcp_load.py                           # builds the project's docs/ (default model) in a temp dir,
                                                       # serves it with one process, 30 clients for 20 s
    python bench/mcp_load.py --clients 10 30 60 --seconds 15 --processes 1 2
    python bench/mcp_load.py --data DIR --sources FILE --vault DIR   # an existing build
    python bench/mcp_load.py --url http://127.0.0.1:8765/mcp --token-file FILE   # a running server

With ``--processes P`` the bench starts P stateless server processes on the same warehouse (read-only opens) and
spreads the clients over them, as a load balancer would. Bounded: at most 200 clients, 120 s per setting. The clients
run in this process (one event loop), which also uses CPU: on a small machine the figures are a floor. Not part of
`make test`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_CLIENTS, MAX_SECONDS = 200, 120
QUERIES = [
    "how do I search my docs from an AI agent", "add a git source", "hybrid search fusion", "read a note page",
    "rebuild after editing notes", "obsidian wikilinks", "embedding model for japanese", "evaluate retrieval",
    "llms.txt source", "where is the warehouse file", "MCP server configuration", "daily refresh schedule",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_docs(root: Path, model: str) -> dict[str, str]:
    """Build the project's docs/ folder into ``root``; returns the DOCSVAULT_* environment of that build."""
    (root / "sources.yaml").write_text(
        f"sources:\n  - name: docsvault-guide\n    kind: local\n    path: {REPO / 'docs'}\n    format: markdown\n",
        encoding="utf-8")
    env = {"DOCSVAULT_SOURCES": str(root / "sources.yaml"), "DOCSVAULT_DATA": str(root / "data"),
           "DOCSVAULT_VAULT": str(root / "vault"), "DOCSVAULT_EVALS": str(REPO / "evals"),
           "DOCSVAULT_MODEL": model, "DAGSTER_HOME": str(root / "dagster")}
    subprocess.run([sys.executable, "-m", "pipeline.cli", "build"], env={**os.environ, **env,
                   "PYTHONPATH": str(REPO)}, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return env


def start_servers(n: int, env: dict[str, str], token: str, stack: ExitStack, logs: Path, stateless: bool = False
                  ) -> list[str]:
    """``n`` server processes (stateless when n > 1 or asked) on 127.0.0.1; their /mcp URLs once they listen."""
    urls, procs = [], []
    for i in range(n):
        port = free_port()
        args = [sys.executable, "-m", "pipeline.cli", "mcp", "--http", "--port", str(port)]
        if n > 1 or stateless:
            args.append("--stateless")
        log = stack.enter_context(open(logs / f"server-{i}.log", "wb"))
        proc = subprocess.Popen(args, env={**os.environ, **env, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1",
                                           "HF_HUB_OFFLINE": "1", "DOCSVAULT_MCP_TOKEN": token},
                                cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)

        def _stop(p: subprocess.Popen = proc) -> None:
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

        stack.callback(_stop)
        procs.append((proc, port))
        urls.append(f"http://127.0.0.1:{port}/mcp")
    deadline = time.monotonic() + 120
    for proc, port in procs:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"server exited: {(logs / 'server-0.log').read_text()[-2000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("server did not start")
            time.sleep(0.1)
    return urls


async def client(url: str, token: str | None, seconds: float, offset: int, lat: list[float], errors: list[str]
                 ) -> None:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        async with create_mcp_http_client(headers=headers) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    end = time.monotonic() + seconds
                    i = offset
                    while time.monotonic() < end:
                        t = time.perf_counter()
                        try:
                            result = await session.call_tool("search", {"query": QUERIES[i % len(QUERIES)], "k": 5})
                            if result.is_error:
                                errors.append(" ".join(getattr(c, "text", "") for c in result.content)[:200])
                            else:
                                lat.append(time.perf_counter() - t)
                        except Exception as exc:  # noqa: BLE001 - counted, the load goes on
                            errors.append(f"{type(exc).__name__}: {exc}"[:200])
                        i += 1
    except Exception as exc:  # noqa: BLE001 - a session that could not open counts as an error
        errors.append(f"session: {type(exc).__name__}: {exc}"[:200])


async def load(urls: list[str], token: str | None, clients: int, seconds: float) -> dict[str, object]:
    lat: list[float] = []
    errors: list[str] = []
    started = time.perf_counter()
    await asyncio.gather(*(client(urls[i % len(urls)], token, seconds, i, lat, errors) for i in range(clients)))
    wall = time.perf_counter() - started
    ms = sorted(x * 1000 for x in lat)
    q = statistics.quantiles(ms, n=20) if len(ms) >= 2 else [float("nan")] * 19
    return {"clients": clients, "seconds": round(wall, 1), "calls": len(ms), "errors": len(errors),
            "calls_per_s": round(len(ms) / wall, 1), "p50_ms": round(statistics.median(ms), 1) if ms else None,
            "p95_ms": round(q[18], 1), "first_error": errors[0] if errors else ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[30])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--processes", type=int, nargs="+", default=[1])
    ap.add_argument("--stateless", action="store_true", help="stateless servers also when --processes is 1")
    ap.add_argument("--url", help="a running server's /mcp URL (then no server is started)")
    ap.add_argument("--token-file", type=Path)
    ap.add_argument("--data", type=Path)
    ap.add_argument("--sources", type=Path)
    ap.add_argument("--vault", type=Path)
    ap.add_argument("--model", default="all-MiniLM-L6-v2", help="model of the docs/ build (default: the bundled)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if any(not 1 <= c <= MAX_CLIENTS for c in args.clients) or not 0 < args.seconds <= MAX_SECONDS:
        raise SystemExit(f"--clients 1..{MAX_CLIENTS}, --seconds up to {MAX_SECONDS}")
    rows = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-load-")))
        if args.url:
            token = args.token_file.read_text().strip() if args.token_file else os.environ.get("DOCSVAULT_MCP_TOKEN")
            settings = [(0, [args.url])]
        else:
            token = secrets.token_hex(24)
            if args.data:
                env = {"DOCSVAULT_DATA": str(args.data.resolve()), "DOCSVAULT_MODEL": args.model}
                if args.sources:
                    env["DOCSVAULT_SOURCES"] = str(args.sources.resolve())
                if args.vault:
                    env["DOCSVAULT_VAULT"] = str(args.vault.resolve())
            else:
                t = time.perf_counter()
                env = build_docs(tmp, args.model)
                print(f"built docs/ with {args.model} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
            settings = []
            for p in args.processes:
                sub = tmp / f"p{p}"
                sub.mkdir()
                settings.append((p, start_servers(p, env, token, stack, sub, args.stateless)))
        for p, urls in settings:
            for c in args.clients:
                asyncio.run(load(urls, token, min(c, 2), 2.0))          # warm-up: model load, first searcher
                row = {"processes": p or "external", **asyncio.run(load(urls, token, c, args.seconds))}
                rows.append(row)
                print(json.dumps(row) if args.json else
                      f"processes={row['processes']} clients={c}: {row['calls']} calls in {row['seconds']} s = "
                      f"{row['calls_per_s']} calls/s, errors {row['errors']}, p50 {row['p50_ms']} ms, "
                      f"p95 {row['p95_ms']} ms" + (f" ({row['first_error']})" if row["errors"] else ""), flush=True)


if __name__ == "__main__":
    main()
