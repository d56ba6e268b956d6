"""gunicorn settings for one instance: ``PORT=8001 gunicorn -c gunicorn.conf.py``.

``PORT`` names the instance: its bind address and every file below. Set it rather than
``--bind`` on the command line, or two instances would share one pid file.

``scripts/serve.sh`` starts one instance per port (``INSTANCES=N`` on consecutive ports
from ``PORT``); each instance is one master with ``WEB_CONCURRENCY`` worker processes.
Everything an instance writes (pid file, logs, Prometheus multiprocess files) lives in
``GUNICORN_RUN_DIR`` (default ``.local/gunicorn``), named by its port.

This is server configuration, not Django code, so it reads the environment directly.
"""

import os
import shutil
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent
PORT = int(os.environ.get("PORT", "8000"))
RUN_DIR = Path(os.environ.get("GUNICORN_RUN_DIR") or BASE_DIR / ".local" / "gunicorn")
RUN_DIR.mkdir(parents=True, exist_ok=True)  # the log files open before any hook runs

wsgi_app = "hoa.wsgi:application"
bind = [f"127.0.0.1:{PORT}"]  # a load balancer or reverse proxy in front (docs/operations.md)
# Sync workers: a fenced operation is a short transaction plus one bounded external call
# (EXTERNAL_CALL_TIMEOUT_SECONDS); size workers to the PostgreSQL pool, not to the CPU only.
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "60"))
graceful_timeout = 30
proc_name = f"hoa-{PORT}"

pidfile = str(RUN_DIR / f"{PORT}.pid")
errorlog = str(RUN_DIR / f"{PORT}.log")
accesslog = str(RUN_DIR / f"{PORT}.access.log")
# gunicorn's default line plus the request's time in microseconds, last: what the server
# itself took, which a client's figure (a load generator's, too) adds its own wait to.
access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %(D)s'
# One control socket per instance (gunicornc -s <path>); the default path is per user.
control_socket = str(RUN_DIR / f"{PORT}.ctl")
# Django's log lines (LOG_FORMAT=json or plain) go to stderr; keep them in the error log.
capture_output = True

# Every worker counts into its own files here; /metrics adds them up. One directory per
# instance: a shared one would be wiped by each starting master and double-counted.
# prometheus-client picks its multiprocess mode when first imported, and workers inherit
# the master's imports: so the variable is set here and the library imported only later.
PROMETHEUS_DIR = Path(
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(RUN_DIR / f"prometheus-{PORT}"))
)


def on_starting(server):
    """Start each run with empty metrics files (the counters restart with the process)."""
    shutil.rmtree(PROMETHEUS_DIR, ignore_errors=True)
    PROMETHEUS_DIR.mkdir(parents=True)


def child_exit(server, worker):
    """Let prometheus-client drop a dead worker's live gauges."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid, str(PROMETHEUS_DIR))
