#!/usr/bin/env python3
"""Runs one MPI test program under mpirun and checks how the job ended.

Usage: run_mpi.py MPIRUN NP EXPECTED_RC [--mca NAME VALUE]... [--expect TEXT]... [--count TEXT N]...
                  -- PROGRAM [ARGS...]

EXPECTED_RC is the exit status mpirun must return; a job whose processes print "SKIPPED:" and
exit 77 is passed on as a skip (77). Each --expect TEXT must appear in the
job's output; each --count TEXT N must appear on exactly N lines (one per surviving process,
say, where no collective call can gather their verdicts). The bound on the run is the test harness's timeout: a job that hangs fails
there. Runs as root too (CI containers), which Open MPI refuses unless told.
"""
import os
import subprocess
import sys

mpirun, np, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
rest = sys.argv[4:]
split = rest.index("--")
options, program = rest[:split], rest[split + 1:]
mca, texts, counts = [], [], []
i = 0
while i < len(options):
    if options[i] == "--mca":
        mca += ["--mca", options[i + 1], options[i + 2]]
        i += 3
    elif options[i] == "--count":
        counts.append((options[i + 1], int(options[i + 2])))
        i += 3
    elif options[i] == "--expect":
        texts.append(options[i + 1])
        i += 2
    else:
        sys.exit(f"run_mpi.py: unknown option {options[i]}")

env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
command = [mpirun, "--oversubscribe", *mca, "-np", np, *program]
print("$", " ".join(command), flush=True)
run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
print(run.stdout)
if run.returncode == 77 and "SKIPPED:" in run.stdout:
    sys.exit(77)  # every process said why it cannot run here
problems = []
if run.returncode != expected:
    problems.append(f"mpirun exited {run.returncode}, expected {expected}")
for t in texts:
    if t not in run.stdout:
        problems.append(f"the output lacks '{t}'")
for t, n in counts:
    found = sum(1 for line in run.stdout.splitlines() if t in line)
    if found != n:
        problems.append(f"'{t}' appears on {found} lines, expected {n}")
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
