#!/usr/bin/env python3
"""Compiled mode (include/ppsched/config.hpp) runs the same code as the header-only build:
each program built both ways prints the same bytes and exits the same way.

usage: check_compiled_mode.py NAME HEADER_ONLY COMPILED [NAME HEADER_ONLY COMPILED ...]
"""
import subprocess
import sys

# Arguments per program; each list is one run. ppsched-plan's runs cover every family
# (make_schedule), lowering, validation, simulation, the text and JSON reports, the search,
# the SVG, Chrome-trace and CSV writers, and the device planner.
RUNS = {
    'quickstart': [[]],
    'ppsched-plan': [
        [],
        ['--json'],
        ['--stage-cost', '1,2,1', '--stages', '4', '--microbatches', '8'],
        ['--stage-cost', '1,1,1', '--stages', '4', '--microbatches', '8', '--comm', '0.5'],
        ['--schedule', 'zb-v', '--stages', '4', '--microbatches', '8'],
        ['--schedule', 'no-such-family'],
        # the search, the writers and the device planner
        ['--schedule', 'auto', '--stages', '4', '--microbatches', '8', '--memory-cap-microbatches', '4'],
        ['--schedule', 'zb-h1', '--stages', '4', '--microbatches', '8', '--svg', '/dev/stdout'],
        ['--schedule', 'zb-h1', '--stages', '4', '--microbatches', '8', '--trace', '/dev/stdout'],
        ['--schedule', 'zb-h1', '--stages', '4', '--microbatches', '8', '--csv', '/dev/stdout'],
        ['--devices', '8', '--global-batch', '64'],
    ],
}


def run(exe, args):
    p = subprocess.run([exe] + args, capture_output=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def main():
    argv = sys.argv[1:]
    if not argv or len(argv) % 3:
        sys.exit(__doc__)
    failures = 0
    for i in range(0, len(argv), 3):
        name, header_only, compiled = argv[i:i + 3]
        for args in RUNS[name]:
            a, b = run(header_only, args), run(compiled, args)
            label = ' '.join([name] + args)
            if a != b:
                failures += 1
                print(f'FAIL {label}: header-only exit {a[0]}, compiled exit {b[0]}; '
                      f'stdout {"same" if a[1] == b[1] else "differs"}, '
                      f'stderr {"same" if a[2] == b[2] else "differs"}')
                print(a[2].decode(errors='replace')[-2000:])
                print(b[2].decode(errors='replace')[-2000:])
            elif not a[1] and not a[2]:
                failures += 1
                print(f'FAIL {label}: printed nothing, so nothing was compared')
            else:
                print(f'ok   {label}: exit {a[0]}, {len(a[1])} bytes of output, identical')
    sys.exit(1 if failures else 0)


main()
