#!/usr/bin/env python3
"""Prints 'N passed, N failed, N skipped' from Meson's JSON test log and exits 1 on a failure."""
import json
import sys

passed = failed = skipped = 0
with open(sys.argv[1], encoding="utf-8") as log:
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
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
