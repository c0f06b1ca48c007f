#!/usr/bin/env bash
# Each gtest named in tests/whole_run_locks.cmake is a discovered test that holds the agent_whole_runs lock
# (ctest silently ignores properties set on a name it does not know: a renamed test would lose its lock).
# Usage: check_whole_run_locks.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
names=$(sed -n 's/^set_tests_properties("\([^"]*\)".*RESOURCE_LOCK agent_whole_runs.*/\1/p' "$src/tests/whole_run_locks.cmake")
[ -n "$names" ] || { echo "FAIL: no test named in whole_run_locks.cmake" >&2; exit 1; }
ctest --test-dir "$build" --show-only=json-v1 2>/dev/null | python3 -c '
import json, sys
tests = {t["name"]: t for t in json.load(sys.stdin)["tests"]}
bad = []
for name in sys.argv[1].split():
    props = {p["name"]: p["value"] for p in tests.get(name, {}).get("properties", [])}
    if name not in tests: bad.append(name + ": no such test")
    elif "agent_whole_runs" not in props.get("RESOURCE_LOCK", []): bad.append(name + ": not under agent_whole_runs")
if bad: sys.exit("FAIL: " + "; ".join(bad))
print("whole-run locks ok:", sys.argv[1])
' "$names"
