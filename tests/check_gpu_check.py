#!/usr/bin/env python3
"""The rehearsal of tools/gpu-check that needs no GPU and no build (test `gpu_check`).

1. NCCL discovery against a wheel-shaped layout (site-packages/nvidia/nccl/{include,lib} with
   only libnccl.so.2, as the nvidia-nccl-cu13 wheel has it), against the CUDA 13 wheels'
   nvidia/cu13 layout, and its refusal, naming every place tried, when nothing is there.
2. `run --no-gpu --skip-build` writes summary.json, summary.md and logs.tar.gz, every GPU
   check "skipped" with the reason (the accuracy stage among them), and exits 0; a bad --deps
   folder exits 2 with its fix.
3. cuBLAS discovery (the toolkit's, the CUDA 13 wheels' nvidia/cu13, none: the places tried),
   and the accuracy stage's reading of bench_accuracy_cuda's JSON: every goal met passes, a
   missed goal fails naming it and its figure, no JSON fails.

The build itself, with the flags the GPU machine uses and warnings as errors, is rehearsed
by .ci/gpu-rehearsal (minutes of nvcc), not here.
Usage: check_gpu_check.py SOURCE_ROOT
"""
import importlib.machinery
import importlib.util
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

root = Path(sys.argv[1]).resolve()
tool = root / "tools" / "gpu-check"
loader = importlib.machinery.SourceFileLoader("gpu_check", str(tool))
spec = importlib.util.spec_from_loader("gpu_check", loader)
gc = importlib.util.module_from_spec(spec)
sys.modules["gpu_check"] = gc  # dataclasses look their module up
loader.exec_module(gc)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED:", what)


HEADER = """#define NCCL_MAJOR 2
#define NCCL_MINOR 27
#define NCCL_PATCH 7
#define NCCL_VERSION_CODE 22707
"""

with tempfile.TemporaryDirectory() as tmp:
    tmp = Path(tmp)
    cuda = tmp / "cuda"  # a toolkit without NCCL
    (cuda / "include").mkdir(parents=True)
    (cuda / "lib64").mkdir()

    # 1a. The nvidia-nccl-cu13 wheel's layout.
    site = tmp / "venv" / "lib" / "python3.12" / "site-packages"
    (site / "nvidia" / "nccl" / "include").mkdir(parents=True)
    (site / "nvidia" / "nccl" / "lib").mkdir()
    (site / "nvidia" / "nccl" / "include" / "nccl.h").write_text(HEADER)
    (site / "nvidia" / "nccl" / "lib" / "libnccl.so.2").write_bytes(b"\x7fELF")
    origin, inc, lib, name, version = gc.find_nccl(cuda, None, [site], system=False)
    check(origin == "wheel", f"wheel layout found as {origin!r}")
    check(inc == site / "nvidia/nccl/include" and lib == site / "nvidia/nccl/lib", f"wheel paths {inc}, {lib}")
    check(name == "libnccl.so.2", f"the wheel has only libnccl.so.2, linked as {name!r}")
    check(version == "2.27.7", f"version read from nccl.h: {version!r}")

    # 1b. A toolkit with NCCL wins over the wheel; --nccl-root wins over both.
    (cuda / "include" / "nccl.h").write_text(HEADER.replace("27", "28"))
    (cuda / "lib64" / "libnccl.so.2").write_bytes(b"\x7fELF")
    origin, _, _, name, _ = gc.find_nccl(cuda, None, [site], system=False)
    check(origin == "cuda toolkit" and name == "libnccl.so.2", f"toolkit NCCL first (its soname), got {origin!r} {name!r}")
    origin, _, _, _, _ = gc.find_nccl(cuda, str(site / "nvidia" / "nccl"), [], system=False)
    check(origin == "given", f"--nccl-root first, got {origin!r}")
    (cuda / "include" / "nccl.h").unlink()

    # 1c. The CUDA 13 wheels' shared folder.
    site2 = tmp / "site2"
    (site2 / "nvidia" / "cu13" / "include").mkdir(parents=True)
    (site2 / "nvidia" / "cu13" / "lib").mkdir()
    (site2 / "nvidia" / "cu13" / "include" / "nccl.h").write_text(HEADER)
    (site2 / "nvidia" / "cu13" / "lib" / "libnccl.so.2").write_bytes(b"\x7fELF")
    origin, inc, _, _, _ = gc.find_nccl(cuda, None, [site2], system=False)
    check(origin == "wheel" and inc == site2 / "nvidia/cu13/include", f"nvidia/cu13 layout: {origin!r} {inc}")

    # 1d. Nothing anywhere: a refusal that names the places tried and the fix.
    try:
        gc.find_nccl(cuda, None, [tmp / "empty"], system=False)
        check(False, "no NCCL anywhere was accepted")
    except gc.Refusal as e:
        text = str(e)
        check(str(cuda / "include") in text and "--nccl-root" in text, f"refusal names places and fix: {text}")

    # 1e. A site folder given on the command line is searched (python_site_dirs keeps it).
    check(site in gc.python_site_dirs([str(site)]), "--python-site folder searched")

    # 2. The summary writer, every GPU check skipped for want of a GPU.
    out = tmp / "out"
    build = tmp / "build"
    build.mkdir()
    p = subprocess.run([sys.executable, str(tool), "run", str(out), "--no-gpu", "--skip-build", "--build", str(build),
                        "--budget", "60"], capture_output=True, text=True, timeout=120)
    print(p.stdout, p.stderr, sep="\n")
    check(p.returncode == 0, f"--no-gpu --skip-build exits 0, got {p.returncode}")
    summary = json.loads((out / "summary.json").read_text())
    check(summary["gpu"]["present"] is False and "no GPU" in summary["gpu"]["reason"], "summary says no GPU")
    names = [c["name"] for c in summary["checks"]]
    for expected in ("discovery", "cuda_smoke", "test_backend_cuda", "test_bubbles_cuda", "bench_cuda",
                     "mlp_training_cuda 1f1b 4", "accuracy (bench_accuracy_cuda)"):
        check(expected in names, f"summary lists {expected!r}")
    accuracy = [c for c in summary["checks"] if c["name"] == "accuracy (bench_accuracy_cuda)"]
    check(accuracy and accuracy[0]["status"] == "skipped" and accuracy[0]["reason"] == "no GPU (--no-gpu given)"
          and "--json" in accuracy[0]["command"], f"accuracy stage skipped with the reason: {accuracy}")
    gpu_checks = [c for c in summary["checks"] if c["name"] not in ("discovery", "build")]
    check(gpu_checks and all(c["status"] == "skipped" and "no GPU" in c["reason"] for c in gpu_checks),
          "every GPU check skipped with the reason")
    check(summary["counts"]["failed"] == 0 and summary["counts"]["passed"] == 1, f"counts {summary['counts']}")
    check(summary["toolchain"]["nccl"]["version"] != "", "toolchain recorded")
    md = (out / "summary.md").read_text()
    check("| test_backend_cuda | skipped |" in md and "no GPU (--no-gpu given)" in md, "markdown table")
    check("| accuracy (bench_accuracy_cuda) | skipped |" in md, "markdown table lists the accuracy stage")
    with tarfile.open(out / "logs.tar.gz") as tar:
        tar.getmembers()  # readable, even when empty

    # A --deps folder without the headers: exit 2 and the command that fills one.
    p = subprocess.run([sys.executable, str(tool), "run", str(out), "--no-gpu", "--skip-build", "--deps", str(tmp)],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "tools/gpu-check deps" in p.stderr, f"bad --deps: {p.returncode} {p.stderr}")

    # 3a. cuBLAS: the toolkit's first, then the wheels'; none: the places tried.
    (cuda / "include" / "cublas_v2.h").write_text("")
    (cuda / "lib64" / "libcublas.so.13").write_bytes(b"\x7fELF")
    found = gc.find_cublas(cuda, cuda / "lib64", [site2])
    check(found == (cuda / "include", cuda / "lib64", "libcublas.so.13"), f"toolkit cuBLAS: {found}")
    (cuda / "include" / "cublas_v2.h").unlink()
    (site2 / "nvidia" / "cu13" / "include" / "cublas_v2.h").write_text("")
    (site2 / "nvidia" / "cu13" / "lib" / "libcublas.so.13").write_bytes(b"\x7fELF")
    found = gc.find_cublas(cuda, cuda / "lib64", [site2])
    check(found == (site2 / "nvidia/cu13/include", site2 / "nvidia/cu13/lib", "libcublas.so.13"), f"wheel cuBLAS: {found}")
    found = gc.find_cublas(cuda, cuda / "lib64", [])
    check(isinstance(found, str) and str(cuda / "include") in found, f"no cuBLAS names the places tried: {found}")

    # 3b. The accuracy stage's figures and goals, from a result shaped as bench_accuracy_cuda writes it.
    def result(time_max=0.08, tau=0.95, slower=0.01):
        rows = []
        for i, family in enumerate(["gpipe", "1f1b", "zb-h1"]):
            rows.append({"model": "mlp-1024", "family": family, "ranks": 2, "microbatches": 8, "rows": 16,
                         "predicted_ms": 10.0 + i, "measured_ms": 10.2 + i, "min_ms": 10.1, "max_ms": 10.4, "noise": 0.01,
                         "error": -0.02, "predicted_peak_bytes": [4194304.0, 2097152.0],
                         "measured_peak_bytes": [4194304.0, 2097152.0], "counted_peak_bytes": [4194304.0, 2097152.0]})
        return {"program": "bench_accuracy_cuda", "gpu": "NVIDIA H100 80GB HBM3", "repetitions": 7, "passes": 2,
                "seconds": 55.0, "unit": "ms", "overheads_ms": {"step": 0.05, "action": 0.006, "transfer": 0.01},
                "timing_cost_ms": {"forward": 0.01, "backward_input": 0.01, "backward_weight": 0.01, "backward": 0.01},
                "models": [{"name": "mlp-1024", "kind": "mlp", "width": 1024, "layers": 8, "batch": 128,
                            "link_bytes_per_ms": 1e9, "concurrent_slowdown": {"16": [1, 1.05, 1.1, 1.2]}}],
                "configurations": rows,
                "picks": [{"model": "mlp-1024", "ranks": 2, "picked": "gpipe m=8", "picked_measured_ms": 10.2,
                           "fastest": "gpipe m=8", "fastest_measured_ms": 10.2, "slower": slower, "holds": slower <= 0.05}],
                "time": {"mean_abs_error": 0.02, "max_abs_error": time_max, "kendall_tau": tau,
                         "kendall_tau_per_model": [tau], "mean_noise": 0.01},
                "memory": {"mean_abs_error": 0.0, "max_abs_error": 0.0, "counted_mean_abs_error": 0.0,
                           "counted_max_abs_error": 0.0},
                "pick_holds": slower <= 0.05,
                "goals": {"mean_abs_error": 0.05, "max_abs_error": 0.1, "kendall_tau": 0.9, "pick_within": 0.05}}

    res = tmp / "accuracy.json"
    res.write_text(json.dumps(result()))
    c = gc.Check("accuracy (bench_accuracy_cuda)", "passed")
    gc.parse_accuracy(c, res)
    check(c.status == "passed" and c.figures["kendall_tau"] == 0.95 and c.figures["time_max_abs_error_pct"] == 8.0
          and all(g["met"] for g in c.figures["goals"].values()) and c.figures["configurations"] == 3,
          f"accuracy goals met: {c.status} {c.reason} {c.figures.get('goals')}")
    res.write_text(json.dumps(result(time_max=0.14, tau=0.8, slower=0.09)))
    c = gc.Check("accuracy (bench_accuracy_cuda)", "passed")
    gc.parse_accuracy(c, res)
    check(c.status == "failed" and "step time max |error| 14.0" in c.reason and "Kendall's tau 0.8" in c.reason
          and "pick vs fastest measured 9.0" in c.reason and "step time mean" not in c.reason,
          f"accuracy goals missed are named: {c.status} {c.reason}")
    c = gc.Check("accuracy (bench_accuracy_cuda)", "passed")
    gc.parse_accuracy(c, tmp / "none.json")
    check(c.status == "failed" and "wrote no" in c.reason, f"no JSON: {c.status} {c.reason}")

    # 3c. CUDA Graphs' rows of bench_cuda: figures lifted into the summary, targets held.
    def bench(host_ratio=0.04, memory_ratio=1.0, error=None):
        rows = [{"name": "BM_HostOverhead/p:1", "host_us_per_action": 3.0, "host_us_per_action_max": 4.0,
                 "step_us_per_action": 5.0, "label": "nccl"},
                {"name": "BM_GraphReplay/p:1/graphs:0", "host_us_per_action": 3.0, "device_mib": 40.0}]
        replay = {"name": "BM_GraphReplay/p:1/graphs:1", "host_us_per_action": 0.12, "host_ratio": host_ratio,
                  "device_mib": 40.0 * memory_ratio, "memory_ratio": memory_ratio}
        if error:
            replay = {"name": "BM_GraphReplay/p:1/graphs:1", "error_occurred": True, "error_message": error}
        return {"benchmarks": rows + [replay]}

    bj = tmp / "bench.json"
    bj.write_text(json.dumps(bench()))
    c = gc.Check("bench_cuda", "passed")
    gc.parse_bench(c, bj)
    check(c.status == "passed" and c.figures["graph_replay"]["BM_GraphReplay/p:1/graphs:1"]["host_ratio"] == 0.04,
          f"graph replay within targets: {c.status} {c.reason} {c.figures.get('graph_replay')}")
    bj.write_text(json.dumps(bench(host_ratio=0.3, memory_ratio=1.2)))
    c = gc.Check("bench_cuda", "passed")
    gc.parse_bench(c, bj)
    check(c.status == "failed" and "host_ratio 0.3" in c.reason and "memory_ratio 1.2" in c.reason,
          f"graph replay targets missed are named: {c.status} {c.reason}")
    bj.write_text(json.dumps(bench(error="capture refused: stage 0 is not capturable")))
    c = gc.Check("bench_cuda", "passed")
    gc.parse_bench(c, bj)
    check(c.status == "failed" and "stage 0 is not capturable" in c.reason,
          f"a failed replay fails the check with its message: {c.status} {c.reason}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("gpu-check rehearsal: all checks passed")
