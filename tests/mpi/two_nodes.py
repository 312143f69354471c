#!/usr/bin/env python3
"""Runs MPI test programs on two "nodes" of one machine: two network namespaces joined by a
veth pair (10.231.0.1 and 10.231.0.2), each with its own host name (a UTS namespace), made
here and removed at the end. mpirun starts in node A and reaches node B through an rsh agent
that enters B's namespaces, as ssh would enter another machine; the processes talk over TCP
only (--mca btl tcp,self), so every transfer between the nodes crosses the veth link.

Usage: two_nodes.py MPIRUN PROGRAM [ARGS...] [--then PROGRAM [ARGS...]]...
Each program runs as 4 processes, 2 per node, and must exit 0 and print "PASS". Checks too
that the link carried traffic (its byte counters). The host names matter: Open MPI 4.1.4,
seeing one host name in both namespaces, took the processes for one node and crashed in
MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) (a plain C program does the same). Exits 77 (skip) with the reason where
namespaces cannot be made (not root, no `ip netns`, no `unshare`).
"""
import os
import shutil
import stat
import subprocess
import sys
import tempfile

mpirun = sys.argv[1]
programs, current = [], []
for arg in sys.argv[2:]:
    if arg == "--then":
        programs.append(current)
        current = []
    else:
        current.append(arg)
programs.append(current)


def skip(reason):
    print(f"SKIPPED: {reason}")
    sys.exit(77)


if os.geteuid() != 0:
    skip("making network namespaces needs root")
for tool in ("ip", "unshare", "hostname"):
    if shutil.which(tool) is None:
        skip(f"'{tool}' is not installed (iproute2, util-linux)")

tag = str(os.getpid())
ns = {"a": "ppsched-a-" + tag, "b": "ppsched-b-" + tag}
link = {"a": "ppva" + tag, "b": "ppvb" + tag}
address = {"a": "10.231.0.1", "b": "10.231.0.2"}


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def tx_bytes(node):
    out = ip("-n", ns[node], "-s", "link", "show", link[node]).stdout.split("\n")
    for i, line in enumerate(out):
        if line.strip().startswith("TX:"):
            return int(out[i + 1].split()[0])
    return 0


scratch = tempfile.mkdtemp(prefix="ppsched-two-nodes-")
status = 0
try:
    try:
        ip("netns", "add", ns["a"])
        ip("netns", "add", ns["b"])
    except subprocess.CalledProcessError as e:
        skip(f"cannot make a network namespace: {e.stderr.strip()}")
    probe = subprocess.run(["ip", "netns", "exec", ns["a"], "unshare", "--uts", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        skip(f"cannot enter a network namespace with a host name of its own: {probe.stderr.strip()}")
    ip("link", "add", link["a"], "type", "veth", "peer", "name", link["b"])
    for node in ("a", "b"):
        ip("link", "set", link[node], "netns", ns[node])
        ip("-n", ns[node], "addr", "add", address[node] + "/24", "dev", link[node])
        ip("-n", ns[node], "link", "set", link[node], "up")
        ip("-n", ns[node], "link", "set", "lo", "up")

    # What mpirun runs instead of ssh: `agent [options] HOST COMMAND...`.
    agent = os.path.join(scratch, "rsh-agent")
    with open(agent, "w", encoding="utf-8") as f:
        f.write("#!/bin/sh\n"
                'while [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done\n'
                'host=$1; shift\n'
                'case "$host" in\n'
                f'  {address["a"]}) ns={ns["a"]}; name=node-a;;\n'
                f'  {address["b"]}) ns={ns["b"]}; name=node-b;;\n'
                '  *) echo "two_nodes: unknown host $host" >&2; exit 255;;\n'
                'esac\n'
                'exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname $name; $*"\n')
    os.chmod(agent, stat.S_IRWXU)

    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    net = f"{address['a'][:-1]}0/24"
    before = tx_bytes("a") + tx_bytes("b")
    for program in programs:
        command = [mpirun, "--oversubscribe", "--host", f"{address['a']}:2,{address['b']}:2",
                   "--mca", "plm_rsh_agent", agent, "--mca", "btl", "tcp,self",
                   "--mca", "btl_tcp_if_include", net, "--mca", "oob_tcp_if_include", net,
                   "-np", "4", *[os.path.abspath(program[0]), *program[1:]]]
        # Node A is where mpirun runs; it too gets a host name of its own.
        shell = "hostname node-a; exec " + " ".join(f"'{c}'" for c in command)
        print("$", " ".join(command), flush=True)
        try:
            run = subprocess.run(["ip", "netns", "exec", ns["a"], "unshare", "--uts", "/bin/sh", "-c", shell],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=100)
        except subprocess.TimeoutExpired as e:
            print(e.output or "")
            print("FAIL: the job did not end within 100 s")
            status = 1
            continue
        print(run.stdout)
        if run.returncode != 0 or "PASS" not in run.stdout:
            print(f"FAIL: exit status {run.returncode}, PASS {'printed' if 'PASS' in run.stdout else 'missing'}")
            status = 1
    carried = tx_bytes("a") + tx_bytes("b") - before
    print(f"the link between the nodes carried {carried} bytes")
    if carried < 100_000:
        print("FAIL: too little traffic crossed the link: the processes did not talk over it")
        status = 1
finally:
    for node in ("a", "b"):
        ip("netns", "del", ns[node], check=False)  # takes the veth pair with it
    shutil.rmtree(scratch, ignore_errors=True)
sys.exit(status)
