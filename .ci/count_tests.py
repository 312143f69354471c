#!/usr/bin/env python3
"""Prints 'N passed, N failed, N skipped' from Meson's JSON test log and exits 1 on a failure.

Usage: count_tests.py TESTLOG.json [--log MORE.json ...] [--extra NAME=FAILED ...]
Each --log adds the results of another Meson run (CI's CUDA stage).
Each --extra adds one result from outside Meson (FAILED is 0 for a pass, 1 for a failure,
skip for a stage that could not run here).
"""
import json
import sys

passed = failed = skipped = 0


def count_log(path):
    global passed, failed, skipped
    with open(path, encoding="utf-8") as log:
        for line in log:
            line = line.strip()
            if not line:
                continue
            result = json.loads(line).get("result", "")
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif result == "SKIP":
                skipped += 1
            else:  # FAIL, TIMEOUT, ERROR, UNEXPECTEDPASS, INTERRUPT
                failed += 1


args = sys.argv[1:]
count_log(args.pop(0))
while args:
    flag = args.pop(0)
    if flag == "--log" and args:
        count_log(args.pop(0))
        continue
    if flag != "--extra" or not args:
        sys.exit(f"count_tests.py: expected --log PATH or --extra NAME=FAILED, got {flag!r}")
    name, _, value = args.pop(0).partition("=")
    if value == "0":
        passed += 1
    elif value == "skip":
        print(f"{name}: skipped")
        skipped += 1
    else:
        print(f"{name}: failed")
        failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
