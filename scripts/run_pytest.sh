#!/usr/bin/env bash
# Run pytest and turn "no tests collected" (exit 5) into a failure: a suite that runs
# nothing must never pass.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: failing on purpose" >&2
    exit 1
fi
exit "$status"
