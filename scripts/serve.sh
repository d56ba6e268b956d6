#!/usr/bin/env bash
# Serve the app with gunicorn, one or more instances on consecutive loopback ports.
#
#   scripts/serve.sh start | stop | status
#
#   INSTANCES=N       instances to run (default 1): ports PORT, PORT+1, … PORT+N-1
#   PORT=8000         the first instance's port; every instance binds 127.0.0.1 only
#   WEB_CONCURRENCY   worker processes per instance (default 2; see gunicorn.conf.py)
#   GUNICORN_RUN_DIR  pid files, logs and Prometheus multiprocess files (default .local/gunicorn)
#
# Each instance is a daemonised gunicorn master whose pid file is <run dir>/<port>.pid;
# stop signals exactly those pids (TERM, then KILL after the graceful timeout). Put a load
# balancer in front of the instances (docs/operations.md has nginx and HAProxy snippets).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
RUN_DIR="${GUNICORN_RUN_DIR:-$ROOT/.local/gunicorn}"
INSTANCES="${INSTANCES:-1}"
PORT="${PORT:-8000}"
START_TIMEOUT_SECONDS="${SERVE_START_TIMEOUT_SECONDS:-30}"
STOP_TIMEOUT_SECONDS=40  # gunicorn's graceful_timeout (30 s) plus a margin

log() { printf '[serve] %s\n' "$*" >&2; }
die() { printf '[serve] error: %s\n' "$*" >&2; exit 1; }

[[ "$INSTANCES" =~ ^[1-9][0-9]*$ ]] || die "INSTANCES must be a positive number, got '$INSTANCES'"
[[ "$PORT" =~ ^[0-9]+$ ]] && [ "$PORT" -ge 1 ] && [ $((PORT + INSTANCES - 1)) -le 65535 ] \
    || die "PORT must be a port number with room for $INSTANCES instance(s), got '$PORT'"

# The pid in a pid file, if that process is alive and is a gunicorn (pids get reused).
live_pid() {
    local pidfile="$1" pid
    [ -f "$pidfile" ] || return 1
    pid="$(cat "$pidfile" 2>/dev/null)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q gunicorn || return 1
    echo "$pid"
}

# Whether 127.0.0.1:$1 answers HTTP (any status: a redirect or a 400 still means serving).
answers_http() {
    .venv/bin/python - "$1" <<'EOF' >/dev/null 2>&1
import http.client, sys
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=2)
conn.request("GET", "/healthz")
conn.getresponse()
EOF
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_one() {
    local port="$1" pidfile="$RUN_DIR/$1.pid" pid deadline
    if pid="$(live_pid "$pidfile")"; then
        log "127.0.0.1:$port already served by gunicorn pid $pid"
        return
    fi
    rm -f "$pidfile"
    port_in_use "$port" && die "127.0.0.1:$port is in use by another program"
    # One Prometheus directory per instance (gunicorn.conf.py wipes it at start).
    PORT="$port" GUNICORN_RUN_DIR="$RUN_DIR" \
        PROMETHEUS_MULTIPROC_DIR="$RUN_DIR/prometheus-$port" \
        .venv/bin/gunicorn -c gunicorn.conf.py --daemon
    deadline=$((SECONDS + START_TIMEOUT_SECONDS))
    until live_pid "$pidfile" >/dev/null && answers_http "$port"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 20 "$RUN_DIR/$port.log" >&2 2>/dev/null || true
            die "gunicorn on 127.0.0.1:$port did not come up in ${START_TIMEOUT_SECONDS}s; see $RUN_DIR/$port.log"
        fi
        sleep 0.2
    done
    log "serving http://127.0.0.1:$port/ (gunicorn pid $(live_pid "$pidfile"), ${WEB_CONCURRENCY:-2} workers, log $RUN_DIR/$port.log)"
}

stop_pid() {
    local pid="$1" port="$2" deadline
    log "stopping gunicorn on 127.0.0.1:$port (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || return 0
    deadline=$((SECONDS + STOP_TIMEOUT_SECONDS))
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "pid $pid did not stop in ${STOP_TIMEOUT_SECONDS}s: killing it"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
}

case "${1:-}" in
    start)
        mkdir -p "$RUN_DIR"
        for ((i = 0; i < INSTANCES; i++)); do start_one $((PORT + i)); done
        ;;
    stop)
        # Every instance this run directory knows of, whatever INSTANCES is now.
        for pidfile in "$RUN_DIR"/*.pid; do
            [ -e "$pidfile" ] || continue
            port="$(basename "$pidfile" .pid)"
            if pid="$(live_pid "$pidfile")"; then stop_pid "$pid" "$port"; fi
            rm -f "$pidfile"
        done
        ;;
    status)
        found=0
        for pidfile in "$RUN_DIR"/*.pid; do
            [ -e "$pidfile" ] || continue
            found=1
            port="$(basename "$pidfile" .pid)"
            if pid="$(live_pid "$pidfile")"; then
                echo "gunicorn 127.0.0.1:$port: up (pid $pid)"
            else
                echo "gunicorn 127.0.0.1:$port: down (stale pid file)"
            fi
        done
        [ "$found" -eq 1 ] || echo "gunicorn: not running"
        ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
