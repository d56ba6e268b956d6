"""One measurement in a fresh process: ``python -m bench.worker`` (the runner starts it).

Reads ``{"entry": "module:function", "django": bool, "params": {...}}`` on stdin, calls the
function and prints its result as one JSON line prefixed ``BENCH-RESULT``.
"""

import importlib
import json
import sys
import warnings

RESULT_PREFIX = "BENCH-RESULT "


def main() -> int:
    request = json.loads(sys.stdin.read())
    # pottery warns about its own internals on import; not our concern in a benchmark.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    if request.get("django"):
        import django

        django.setup()
    module_name, _, function_name = request["entry"].partition(":")
    function = getattr(importlib.import_module(module_name), function_name)
    result = function(**request.get("params", {}))
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
