#!/usr/bin/env bash
# Project-local PostgreSQL and Redis for development, tests, benchmarks and CI.
#
#   scripts/services.sh start | stop | status | restart-redis [--flush] | stop-redis | start-redis
#                       | enable-pg-stat-statements
#
# Data lives under .local/ (PostgreSQL in .local/pg, Redis in .local/redis). The servers
# listen on 127.0.0.1 only, on ports that do not clash with system services
# (HOA_PG_PORT, default 55432; HOA_REDIS_PORT, default 56379). PostgreSQL refuses to run
# as root, so as root it runs as the `postgres` system user. Missing server binaries are
# installed with apt-get when running as root; otherwise the script says what to install.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCAL="$ROOT/.local"
PG_PORT="${HOA_PG_PORT:-55432}"
REDIS_PORT="${HOA_REDIS_PORT:-56379}"
PG_USER_NAME="hoa"
PG_DB_NAME="hoa"
REDIS_DIR="$LOCAL/redis"

log() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] error: %s\n' "$*" >&2; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

apt_install() {
    is_root || die "missing system packages: $*. Install them (sudo apt-get install -y $*) and re-run."
    command -v apt-get >/dev/null || die "missing $* and no apt-get to install them"
    log "installing $* with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y --no-install-recommends "$@" >"$LOCAL/apt.log" 2>&1; then
        apt-get update >>"$LOCAL/apt.log" 2>&1 || true
        apt-get install -y --no-install-recommends "$@" >>"$LOCAL/apt.log" 2>&1 \
            || die "apt-get install $* failed; see $LOCAL/apt.log"
    fi
}

pg_bindir() {
    local dir
    if command -v pg_config >/dev/null && dir="$(pg_config --bindir 2>/dev/null)" && [ -x "$dir/postgres" ]; then
        echo "$dir"; return
    fi
    # pg_config may come from libpq-dev and name a folder without the server in it.
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        [ -x "$dir/postgres" ] && { echo "$dir"; return; }
    done
    return 1
}

ensure_binaries() {
    mkdir -p "$LOCAL"
    pg_bindir >/dev/null || apt_install postgresql
    command -v redis-server >/dev/null || apt_install redis-server
    pg_bindir >/dev/null || die "PostgreSQL server binaries not found after install"
}

# PostgreSQL must run unprivileged. As root we use the `postgres` account; its data folder
# must be reachable by that account, which a checkout inside a private folder (mktemp -d is
# 0700) is not. Then the data lives in a world-traversable place and .local/pg links to it.
pg_run_user() { if is_root; then echo postgres; else id -un; fi; }

as_pg() {
    # From / so that the postgres user is not left in a folder it cannot read.
    if is_root; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

pg_datadir() {
    if [ -L "$LOCAL/pg" ] || [ -d "$LOCAL/pg" ]; then
        readlink -f "$LOCAL/pg"; return
    fi
    if ! is_root || runuser -u postgres -- test -x "$LOCAL" 2>/dev/null; then
        echo "$LOCAL/pg"; return
    fi
    local hash alt
    hash="$(printf '%s' "$ROOT" | sha1sum | cut -c1-12)"
    alt="/var/tmp/hoa-pg-$hash"
    ln -sfn "$alt" "$LOCAL/pg"
    log "checkout is not reachable by the postgres user; PostgreSQL data in $alt (linked from .local/pg)"
    echo "$alt"
}

pg_is_up() { "$(pg_bindir)/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" >/dev/null 2>&1; }

start_pg() {
    local bindir data
    bindir="$(pg_bindir)"
    data="$(pg_datadir)"
    if pg_is_up; then log "PostgreSQL already up on 127.0.0.1:$PG_PORT"; return; fi
    if [ ! -f "$data/PG_VERSION" ]; then
        log "initialising PostgreSQL cluster in $data"
        mkdir -p "$data"
        is_root && chown postgres: "$data"
        chmod 700 "$data"
        # Trust auth on loopback only: a disposable development cluster, never exposed.
        as_pg "$bindir/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 \
            --locale=C.UTF-8 >"$LOCAL/initdb.log" 2>&1 || die "initdb failed; see $LOCAL/initdb.log"
        cat >>"$data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$data'
max_connections = 200
fsync = on
EOF
    fi
    log "starting PostgreSQL on 127.0.0.1:$PG_PORT"
    # -p overrides the port written at initdb, so HOA_PG_PORT is honoured by an existing
    # data folder too (make faults / bench beside a running make test).
    as_pg "$bindir/pg_ctl" -D "$data" -l "$data/server.log" -o "-p $PG_PORT" -w -t 60 start >/dev/null \
        || die "PostgreSQL did not start; see $data/server.log"
    local psql=("$bindir/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qAt)
    if [ "$("${psql[@]}" -c "SELECT 1 FROM pg_roles WHERE rolname = '$PG_USER_NAME'")" != "1" ]; then
        "${psql[@]}" -c "CREATE ROLE $PG_USER_NAME LOGIN CREATEDB"
    fi
    if [ "$("${psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname = '$PG_DB_NAME'")" != "1" ]; then
        "${psql[@]}" -c "CREATE DATABASE $PG_DB_NAME OWNER $PG_USER_NAME"
    fi
}

stop_pg() {
    local data
    data="$(pg_datadir)"
    if [ -f "$data/postmaster.pid" ]; then
        log "stopping PostgreSQL"
        as_pg "$(pg_bindir)/pg_ctl" -D "$data" -m fast -w stop >/dev/null || true
    fi
}

# make bench-scale reads where the month start's time goes from pg_stat_statements, which
# the server must load at start (shared_preload_libraries): add it to what the cluster
# loads and restart PostgreSQL, once; a no-op when it is loaded already.
enable_pg_stat_statements() {
    local psql=("$(pg_bindir)/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qAt)
    pg_is_up || start_pg
    local loaded
    loaded="$("${psql[@]}" -c "SHOW shared_preload_libraries")"
    case ",${loaded// /}," in *,pg_stat_statements,*) return ;; esac
    log "loading pg_stat_statements into PostgreSQL on 127.0.0.1:$PG_PORT (a restart)"
    "${psql[@]}" -c "ALTER SYSTEM SET shared_preload_libraries = '${loaded:+$loaded,}pg_stat_statements'"
    stop_pg
    start_pg
}

redis_cli() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"; }
redis_is_up() { [ "$(redis_cli ping 2>/dev/null)" = "PONG" ]; }

start_redis() {
    if redis_is_up; then log "Redis already up on 127.0.0.1:$REDIS_PORT"; return; fi
    mkdir -p "$REDIS_DIR"
    log "starting Redis on 127.0.0.1:$REDIS_PORT"
    # Default durability (RDB snapshots) on purpose: the fence survives counter loss by
    # reseeding from PostgreSQL, and the benchmarks report what they ran against.
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$REDIS_DIR" \
        --daemonize yes --pidfile "$REDIS_DIR/redis.pid" --logfile "$REDIS_DIR/redis.log" \
        --protected-mode yes --save "3600 1 300 100 60 10000"
    for _ in $(seq 1 100); do redis_is_up && return; sleep 0.1; done
    die "Redis did not start; see $REDIS_DIR/redis.log"
}

stop_redis() {
    if [ -f "$REDIS_DIR/redis.pid" ]; then
        local pid
        pid="$(cat "$REDIS_DIR/redis.pid")"
        if kill -0 "$pid" 2>/dev/null; then
            log "stopping Redis (pid $pid)"
            kill "$pid"
            for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        fi
        rm -f "$REDIS_DIR/redis.pid"
    fi
}

status() {
    if pg_bindir >/dev/null && pg_is_up; then echo "postgresql: up (127.0.0.1:$PG_PORT)"; else echo "postgresql: down"; fi
    if command -v redis-cli >/dev/null && redis_is_up; then echo "redis: up (127.0.0.1:$REDIS_PORT)"; else echo "redis: down"; fi
}

case "${1:-}" in
    start) ensure_binaries; start_pg; start_redis ;;
    stop) stop_redis; pg_bindir >/dev/null && stop_pg; true ;;
    status) status ;;
    enable-pg-stat-statements) ensure_binaries; enable_pg_stat_statements ;;
    start-redis) start_redis ;;
    stop-redis) stop_redis ;;
    restart-redis)
        stop_redis
        # --flush simulates a Redis that restarts without persistence (fence counter lost).
        [ "${2:-}" = "--flush" ] && rm -f "$REDIS_DIR"/dump.rdb "$REDIS_DIR"/appendonly.aof
        start_redis ;;
    *) echo "usage: $0 start|stop|status|start-redis|stop-redis|restart-redis [--flush]|enable-pg-stat-statements" >&2; exit 2 ;;
esac
