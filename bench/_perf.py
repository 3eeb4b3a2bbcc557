"""Helpers of ``bench/run.py``: percentiles, the machine's FLOP bound, FLOPs per chunk of the embedding models, a
child process's wall time and peak RSS, and the figure table. Pure functions except :func:`run_child` and
:func:`read_cpu`; tests/test_bench_perf.py checks them on fixtures.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

# Issue 19 targets ("Faster where users wait"); bench/run.py, search_cold.py and search_latency.py print them
T_FULL_S, T_FULL_RSS_GB = 360, 2.0
T_NOOP_S, T_PAGES_S, T_ADD_S = 3, 10, 15
T_COLD_S, T_P50_MS, T_P95_MS, T_SEARCH_RSS_MB = 1.0, 15, 30, 600
T_SIZE_PCT, T_MAKE_TEST_S = 5.0, 300


def verdict(ok: bool) -> str:
    """``met`` or ``MISSED`` (as bench/run.py's table prints it)."""
    return "met" if ok else "MISSED"


def pct(values: Sequence[float], p: float) -> float:
    """The p-quantile (0..1) of values, linearly interpolated between closest ranks; NaN when empty."""
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


# ---------------------------------------------------------------------------------------------------------------
# the machine's FLOP bound

@dataclass(frozen=True)
class Cpu:
    """What the FLOP bound is computed from: physical cores, clock (MHz), ISA flags (lower case), model name."""

    cores: int
    mhz: float
    flags: frozenset[str]
    model: str = ""
    mhz_source: str = ""


def parse_cpu(lscpu: str, cpuinfo: str, cpu_count: int) -> Cpu:
    """Cores, clock and flags from ``lscpu`` output and ``/proc/cpuinfo`` text (either may be "").

    Cores: ``Core(s) per socket`` × ``Socket(s)`` of lscpu, else distinct (physical id, core id) of cpuinfo, else
    ``cpu_count``; never more than ``cpu_count`` (the CPUs this process may use). Clock: lscpu ``CPU max MHz``, else
    the first ``cpu MHz`` of cpuinfo (a VM often reports only this), else 0. Flags: lscpu ``Flags`` or cpuinfo
    ``flags``.
    """
    kv: dict[str, str] = {}
    for line in lscpu.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            kv.setdefault(k.strip(), v.strip())
    info: dict[str, str] = {}
    phys: set[tuple[str, str]] = set()
    cur: dict[str, str] = {}
    for line in cpuinfo.splitlines() + [""]:
        if not line.strip():
            if "core id" in cur:
                phys.add((cur.get("physical id", "0"), cur["core id"]))
            cur = {}
            continue
        if ":" in line:
            k, v = line.split(":", 1)
            cur[k.strip()] = v.strip()
            info.setdefault(k.strip(), v.strip())
    cores = 0
    try:
        cores = int(kv["Core(s) per socket"]) * int(kv.get("Socket(s)", "1"))
    except (KeyError, ValueError):
        cores = len(phys)
    cores = min(cores or cpu_count, cpu_count) or 1
    mhz, src = 0.0, ""
    for key, source, where in (("CPU max MHz", kv, "lscpu max"), ("cpu MHz", info, "cpuinfo")):
        try:
            mhz = float(source[key].replace(",", "."))
            src = where
            break
        except (KeyError, ValueError):
            continue
    flags = frozenset((kv.get("Flags") or info.get("flags") or "").lower().split())
    return Cpu(cores=cores, mhz=mhz, flags=flags, model=kv.get("Model name") or info.get("model name", ""),
               mhz_source=src)


def read_cpu() -> Cpu:
    """:func:`parse_cpu` on this machine (``lscpu`` when installed, ``/proc/cpuinfo`` on Linux)."""
    try:
        lscpu = subprocess.run(["lscpu"], check=False, capture_output=True, text=True, timeout=10,
                               env={**os.environ, "LC_ALL": "C"}).stdout
    except (OSError, subprocess.SubprocessError):
        lscpu = ""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        cpuinfo = ""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return parse_cpu(lscpu, cpuinfo, n)


FMA_PIPES = 2   # assumption: two FMA-capable vector pipes per core (Zen 2+, Skylake-SP Gold/Platinum and later)


def fp32_flops_per_cycle(flags: frozenset[str]) -> int:
    """Peak fp32 FLOPs per cycle per core: vector lanes (AVX-512 16, AVX/AVX2 8, SSE 4, else 1) × 2 when FMA (a
    fused multiply-add counts 2 FLOPs; without FMA a separate mul and add pipe give the same 2) × ``FMA_PIPES``."""
    lanes = 16 if "avx512f" in flags else 8 if ("avx2" in flags or "avx" in flags) else 4 if "sse2" in flags else 1
    return lanes * 2 * FMA_PIPES


AMX_BF16_FLOPS_PER_CYCLE = 1024   # Intel's figure for one AMX TMUL unit (bf16), per core


def int8_ops_per_cycle(flags: frozenset[str]) -> int:
    """Peak int8 multiply-add ops (2 per MAC) per cycle per core: AVX-512 VNNI 256 (vpdpbusd zmm: 64 MACs, two
    pipes), AVX-VNNI 128 (ymm), AVX2 without VNNI 64 (vpmaddubsw + vpmaddwd + vpaddd: 32 MACs in about 1.5 cycles
    of two pipes, rounded to 2× the fp32 rate), else the fp32 rate."""
    if "avx512_vnni" in flags:
        return 256
    if "avx_vnni" in flags:
        return 128
    if "avx2" in flags:
        return 64
    return fp32_flops_per_cycle(flags)


def flop_bound(cpu: Cpu) -> dict[str, float]:
    """GFLOP/s (GOP/s for int8) bounds over all cores: ``fp32`` (vector FMA), ``int8`` (integer dot products) and
    ``amx_bf16`` when the CPU has AMX (0 otherwise)."""
    ghz = cpu.mhz / 1000
    out = {"fp32": cpu.cores * ghz * fp32_flops_per_cycle(cpu.flags),
           "int8": cpu.cores * ghz * int8_ops_per_cycle(cpu.flags), "amx_bf16": 0.0}
    if "amx_bf16" in cpu.flags:
        out["amx_bf16"] = cpu.cores * ghz * AMX_BF16_FLOPS_PER_CYCLE
    return out


def isa_summary(flags: frozenset[str]) -> str:
    """The flags that matter for the bound, in a fixed order: "avx2 fma" etc.; "-" when none."""
    keys = ("avx", "avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_bf16", "amx_int8")
    return " ".join(k for k in keys if k in flags) or "-"


# FLOPs of the three default models: 2 × matmul weights per token (each weight is one multiply-add per token), plus,
# for usem3, the per-text head. Embedding tables are lookups (no FLOPs); attention scores (2·L·T²·d per text) are
# left out, so the bound is a little optimistic for long chunks.
class ModelCost(NamedTuple):
    label: str
    per_token: float        # parameters counted once per token
    per_text: float         # parameters counted once per text
    note: str


MODEL_COSTS: dict[str, ModelCost] = {
    "minilm-l6": ModelCost("MiniLM-L6", 10.6e6, 0.0, "22 M params, 10.6 M of them in the 6 encoder layers "
                           "(6 × (4·384² + 2·384·1536)); the 11.7 M embedding table is a lookup"),
    "e5-small": ModelCost("e5-small", 21.2e6, 0.0, "21 M encoder params (12 × (4·384² + 2·384·1536))"),
    "universal-sentence-encoder": ModelCost(
        "usem3", 1.70e6, 1.68e6, "1.70 M matmul params per token (n-gram CNN) + 1.68 M per text (head); "
        "the 65 M embedding table is a lookup"),
}


def model_precision(model_id: str) -> str:
    """"int8" for an int8-quantized model id (the default MiniLM runs int8 on ONNX Runtime), else "fp32"."""
    return "int8" if "int8" in model_id.lower() else "fp32"


def model_cost(model_id: str) -> ModelCost | None:
    """The cost entry whose key occurs in the lower-cased model id, None for an unknown model (e.g. hash)."""
    mid = model_id.lower()
    for key, cost in MODEL_COSTS.items():
        if key in mid:
            return cost
    return None


def flops_per_chunk(cost: ModelCost, tokens: float) -> float:
    """2 · (per_token · tokens + per_text) FLOPs for one chunk of ``tokens`` tokens."""
    return 2.0 * (cost.per_token * tokens + cost.per_text)


def bound_line(cost: ModelCost, mean_tokens: float, chunks_per_s: float, gflops_bound: float,
               precision: str = "fp32") -> str:
    """"T tok/chunk, G GFLOP/chunk; A GFLOP/s = P% of the <precision> bound B GFLOP/s (C chunks/s at the bound)"."""
    f = flops_per_chunk(cost, mean_tokens)
    achieved = chunks_per_s * f / 1e9
    share = achieved / gflops_bound * 100 if gflops_bound else float("nan")
    at_bound = gflops_bound * 1e9 / f if f else float("nan")
    unit = "GOP" if precision == "int8" else "GFLOP"
    return (f"{mean_tokens:.0f} tok/chunk, {f / 1e9:.2f} {unit}/chunk; {achieved:.1f} {unit}/s = {share:.1f}% of "
            f"the {precision} bound {gflops_bound:.0f} {unit}/s ({at_bound:.0f} chunks/s at the bound)")


# ---------------------------------------------------------------------------------------------------------------
# child processes

class Child(NamedTuple):
    returncode: int
    wall: float             # seconds
    maxrss_kb: int          # peak RSS of the child and its waited-for descendants (ru_maxrss, KiB on Linux)
    stdout: str
    stderr: str
    tree_rss_kb: int = 0    # peak of the summed RSS of the child and every descendant alive at once (sampled)
    tree_pss_kb: int = 0    # peak of their summed PSS (sampled): pages two of them share (the search caches both
                            # memory-map, shared libraries) counted once, split between them; Linux only, else RSS

    @property
    def peak_kb(self) -> int:
        """The larger of the two RSS peaks: ``ru_maxrss`` is one process's (a child's memory is not added to its
        parent's), the tree sample may miss a short spike. Pages the processes share count once per process."""
        return max(self.maxrss_kb, self.tree_rss_kb)

    @property
    def memory_kb(self) -> int:
        """The tree's peak memory: the larger of its summed PSS (each physical page counted once) and the largest
        single process's ``ru_maxrss``."""
        return max(self.maxrss_kb, self.tree_pss_kb or self.tree_rss_kb)


#: a small launcher between the bench and a measured child: Linux charges the high-water RSS of the address space a
#: process had before ``exec`` to the new program's ``ru_maxrss``, and a child spawned straight from the bench
#: starts from a copy of the bench (which holds models after the in-process queries: every later child then
#: "peaked" at the bench's own ~1.9 GB). Spawned from this launcher (~10 MB), the figure is the child's own.
_LAUNCHER = ("import os, subprocess, sys\n"
             "proc = subprocess.Popen(sys.argv[2:])\n"
             "_, status, usage = os.wait4(proc.pid, 0)\n"
             "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
             "code = os.waitstatus_to_exitcode(status)\n"
             "sys.exit(code if code >= 0 else 128 - code)\n")


#: compiles the ``pipeline`` package a child process with the same environment imports
_COMPILE = "import compileall, os, pipeline; compileall.compile_dir(os.path.dirname(pipeline.__file__), quiet=1)"


def compile_bytecode(env: dict[str, str], cwd: Path, flags: Sequence[str] = ()) -> None:
    """Write the ``.pyc`` files of the ``pipeline`` package the timed processes import (as ``pip install`` does),
    before timing process starts: with ``PYTHONDONTWRITEBYTECODE`` set (this machine sets it) a process never
    writes them, so every timed run would compile each module edited since they were last written (~0.1-0.3 s of a
    cold search after an edit of the searcher) -- time no installed copy spends. ``flags``: the interpreter flags
    the timed children use (``-P``)."""
    subprocess.run([sys.executable, *flags, "-c", _COMPILE], env=env, cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL)


def run_child(cmd: Sequence[str], env: dict[str, str], cwd: Path, work: Path) -> Child:
    """Run cmd to completion; wall time and this child's own peak RSS (``os.wait4`` in a small launcher process, see
    :data:`_LAUNCHER`; not the max over every child this process ever had, as ``getrusage(RUSAGE_CHILDREN)`` would
    give). Output goes through files in ``work``."""
    out_f, err_f, rss_f = work / "child.out", work / "child.err", work / "child.maxrss"
    rss_f.unlink(missing_ok=True)
    with out_f.open("wb") as out, err_f.open("wb") as err:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-S", "-c", _LAUNCHER, str(rss_f), *cmd], env=env, cwd=cwd,
                                stdout=out, stderr=err)
        tree_kb, tree_pss_kb = _sample_tree_rss(proc)
        wall = time.perf_counter() - started
    maxrss = int(rss_f.read_text()) if rss_f.is_file() else 0
    return Child(proc.returncode, wall, maxrss, out_f.read_text(errors="replace"), err_f.read_text(errors="replace"),
                 tree_kb, tree_pss_kb)


def _pss_kb(pid: int) -> int | None:
    """A process's proportional set size in KiB (``/proc/<pid>/smaps_rollup``), None where the kernel has none."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


#: the share of one core the PSS reads may take: ``/proc/<pid>/smaps_rollup`` walks the process's page tables under
#: its memory-map lock (~33 ms for a build holding 2.4 GB), so read every 0.1 s it took a third of a core from the
#: 2-core machine it measured and stalled the build's own page faults
PSS_BUDGET = 0.03


def _sample_tree_rss(proc: subprocess.Popen, interval: float = 0.1,
                     pss_budget: float = PSS_BUDGET) -> tuple[int, int]:
    """Wait for ``proc`` (the launcher); every ``interval`` s sum the RSS of its descendants (the measured command and
    whatever it starts, the launcher itself left out), and their PSS as often as ``pss_budget`` allows (a sweep of
    PSS reads that took d seconds is next made d / pss_budget later; between sweeps each process's last PSS stands,
    its RSS for a process not yet read); return the largest sums ``(rss, pss)`` in KiB. RSS counts a page shared by
    two processes (a memory-mapped file both read) twice; PSS splits it between them, so the PSS sum is the tree's
    physical memory. A process without PSS counts its RSS."""
    import psutil

    peak = peak_pss = 0
    pss_of: dict[int, int] = {}
    next_pss = 0.0
    launcher = psutil.Process(proc.pid)
    while proc.poll() is None:
        total = total_pss = 0
        try:
            kids = launcher.children(recursive=True)
        except psutil.Error:
            kids = []
        sweep = time.perf_counter() >= next_pss
        started = time.perf_counter()
        for kid in kids:
            try:
                rss = kid.memory_info().rss // 1024
            except psutil.Error:
                continue
            total += rss
            if sweep:
                pss = _pss_kb(kid.pid)
                pss_of[kid.pid] = rss if pss is None else pss
            total_pss += pss_of.get(kid.pid, rss)
        if sweep and kids:
            took = time.perf_counter() - started
            next_pss = time.perf_counter() + took / pss_budget
        peak = max(peak, total)
        peak_pss = max(peak_pss, total_pss)
        time.sleep(interval)
    return peak, peak_pss


def dir_bytes(path: Path) -> int:
    """Total size of the regular files under path (path itself when a file); 0 when missing."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


# ---------------------------------------------------------------------------------------------------------------
# the table

@dataclass
class Table:
    """Rows (figure, measured, target, verdict); verdict "ok", "MISSED", "FAILED" or "" (no target)."""

    rows: list[tuple[str, str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)      # printed under the table

    def row(self, figure: str, measured: str, target: str = "", ok: bool | None = None) -> None:
        self.rows.append((figure, measured, target, "" if ok is None else ("ok" if ok else "MISSED")))

    def skipped(self, figures: Sequence[tuple[str, str]], why: str) -> None:
        for figure, target in figures:
            self.row(figure, f"not run ({why})", target)

    @contextmanager
    def section(self, figures: Sequence[tuple[str, str]]) -> Iterator[None]:
        """Run a step; if it raises, every figure of ``figures`` (figure, target) it has not printed yet gets a
        FAILED row naming the error, and the run goes on."""
        start = len(self.rows)
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - a failed step is a row, not the end of the run
            msg = " ".join(f"{type(exc).__name__}: {exc}".split())[:160]
            done = {r[0] for r in self.rows[start:]}
            todo = [(f, t) for f, t in figures if f not in done] or [("  (step)", "")]
            for figure, target in todo:
                self.rows.append((figure, f"failed: {msg}", target, "FAILED"))

    def missed(self) -> list[str]:
        return [f"{r[0].strip()}{' (failed)' if r[3] == 'FAILED' else ''}" for r in self.rows
                if r[3] in ("MISSED", "FAILED")]

    def render(self, max_measured: int = 110) -> str:
        width = max([len(r[0]) for r in self.rows] + [6])
        mw = min(max([len(r[1]) for r in self.rows] + [8]), max_measured)
        tw = max([len(r[2]) for r in self.rows] + [6])
        lines = [f"{'figure':{width}}  {'measured':{mw}}  {'target':{tw}}  verdict", "-" * (width + mw + tw + 14)]
        for figure, measured, target, verdict in self.rows:
            lines.append(f"{figure:{width}}  {measured:{mw}}  {target:{tw}}  {verdict}".rstrip())
        if self.notes:
            lines.append("")
            lines.extend(f"note: {n}" for n in self.notes)
        missed = self.missed()
        lines.append("")
        lines.append("missed targets: " + (", ".join(missed) if missed else "none"))
        return "\n".join(lines)
