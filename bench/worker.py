"""One measurement in a fresh process: ``python -m bench.worker`` (the runner starts it).

Reads ``{"entry": "module:function", "django": bool, "params": {...}}`` on stdin, calls the
function and prints its result as one JSON line prefixed ``BENCH-RESULT``.
"""

import importlib
import json
import sys
import warnings

RESULT_PREFIX = "BENCH-RESULT "

if __name__ == "__main__":
    request = json.loads(sys.stdin.read())
    # pottery warns about its own internals on import; not our concern in a benchmark.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    if request["django"]:
        import django

        django.setup()
    module, _, function = request["entry"].partition(":")
    result = getattr(importlib.import_module(module), function)(**request["params"])
    print(RESULT_PREFIX + json.dumps(result), flush=True)
