#!/usr/bin/env python3
"""Compiles every translation unit of the project and every public header with a second
compiler (clang 14, Debian 12's) under -Wall -Wextra -Werror, syntax only.

The main build uses g++; clang's front end warns about things g++ does not (a variable set but
never read, an unused lambda capture) and refuses C++20 that g++ accepts, so a header that is
clean for one compiler can still break a user of the other.

Usage: check_warnings.py SOURCE_ROOT [COMPILER]
Exits 77 (Meson's SKIP) with the reason when the compiler is missing; prints each failing
file's diagnostics and exits 1 when any file warns.
"""
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile

root = os.path.abspath(sys.argv[1])
compiler = sys.argv[2] if len(sys.argv) > 2 else (shutil.which("clang++-14") or shutil.which("clang++") or "")
if not compiler or not shutil.which(compiler):
    print("SKIPPED: no clang++ found (bootstrap.sh installs Debian's clang)")
    sys.exit(77)

flags = ["-std=c++20", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
         "-I" + os.path.join(root, "include"), "-I" + os.path.join(root, "tests"),
         "-I" + os.path.join(root, "examples"),
         # The tools print the project version, test_compiled compares config.hpp's with it;
         # Meson defines both for the real build.
         '-DPPSCHED_VERSION="warnings-check"', '-DPPSCHED_MESON_VERSION="warnings-check"']

# MPI's headers (backend/mpi, its tests, example and benchmark) are checked where the MPI
# compiler wrapper says where they are, and left out elsewhere.
mpi_flags = []
if shutil.which("mpicxx"):
    showme = subprocess.run(["mpicxx", "--showme:compile"], capture_output=True, text=True)
    if showme.returncode == 0:
        mpi_flags = showme.stdout.split()
flags += mpi_flags


def needs_missing_mpi(path):
    return not mpi_flags and "mpi" in os.path.basename(path)


# Units whose dependencies are not plain system headers are left to the build that has them:
# CUDA sources need nvcc, the libtorch adapter's tests need libtorch.
def wanted(path):
    return (path.endswith(".cpp") and "cuda" not in path and "torch" not in os.path.basename(path)
            and not needs_missing_mpi(path))

units = []
for folder in ("src", "tests", "tests/mpi", "examples", "bench", "fuzz"):
    top = os.path.join(root, folder)
    for name in sorted(os.listdir(top)):
        path = os.path.join(top, name)
        if os.path.isfile(path) and wanted(path):
            units.append(path)

# Every public header in two units, in path order and in reverse, rather than one unit per
# header: each header alone is the g++ test headers_alone's job, and clang's warnings in a
# header do not depend on what else is included. Two orders also catch a name that only
# clashes when another header came first (backend/mpi's transfer record was once `Op`, which
# was ambiguous with the schedule's `Op` where action.hpp preceded it).
scratch = tempfile.mkdtemp(prefix="ppsched-warnings-")
include_root = os.path.join(root, "include")
headers = []
for dirpath, _, names in os.walk(os.path.join(include_root, "ppsched")):
    for name in names:
        header = os.path.relpath(os.path.join(dirpath, name), include_root)
        # The CUDA headers need nvcc's toolkit, the adapters their framework (libtorch).
        if not header.endswith(".hpp") or header.startswith(("ppsched/backend/cuda", "ppsched/adapters")):
            continue
        if header.startswith("ppsched/backend/mpi") and not mpi_flags:
            continue
        # compiled.hpp must open its .cpp file (it says so with #error); src/compiled.cpp has it.
        if header == "ppsched/compiled.hpp":
            continue
        headers.append(header)
headers.sort()
for order, listed in (("forward", headers), ("reverse", headers[::-1])):
    unit = os.path.join(scratch, f"every_header_{order}.cpp")
    with open(unit, "w", encoding="utf-8") as out:
        out.writelines(f"#include <{header}>\n" for header in listed)
    units.append(unit)


# Units read here in compiled mode (include/ppsched/config.hpp): the parts' tests and the MPI
# programs (compiled mode in .ci/reliability's builds and test_compiled always; the default
# build has the parts header-only, option test_mode), the examples but the quickstart and
# ppsched-plan (examples/meson.build), the benchmarks (bench/meson.build). The bodies they do not
# read are checked by the headers alone, here too, and src/compiled.cpp.
def compiled_mode(unit):
    folder, name = os.path.dirname(unit), os.path.basename(unit)
    if folder in (os.path.join(root, "tests"), os.path.join(root, "tests", "mpi")):
        return not name.endswith("_main.cpp") and name not in {"catch_main.cpp", "odr_a.cpp", "odr_b.cpp"}
    if folder == os.path.join(root, "examples"):
        return name not in {"quickstart.cpp", "ppsched_plan.cpp"}
    return folder == os.path.join(root, "bench")


def check(unit):
    extra = ["-DPPSCHED_COMPILED"] if compiled_mode(unit) else []
    run = subprocess.run([compiler, *flags, *extra, unit], capture_output=True, text=True)
    return unit, run.returncode, run.stderr


failed = 0
with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
    for unit, code, errors in pool.map(check, units):
        if code != 0:
            failed += 1
            print(f"== {os.path.relpath(unit, root) if unit.startswith(root) else os.path.basename(unit)}")
            print(errors[:6000])
shutil.rmtree(scratch, ignore_errors=True)
print(f"{compiler}: {len(units) - failed} of {len(units)} units clean under -Wall -Wextra")
sys.exit(1 if failed else 0)
