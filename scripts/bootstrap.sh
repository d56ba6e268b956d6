#!/usr/bin/env bash
# Bootstrap steps shared by the Makefile targets.
#   scripts/bootstrap.sh venv      create .venv and install the pinned requirements
#   scripts/bootstrap.sh chromium  make sure a system Chromium exists for browser tests
#   scripts/bootstrap.sh promtool  make sure promtool exists (Debian's prometheus package)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[bootstrap] %s\n' "$*" >&2; }

case "${1:-}" in
    venv)
        python="${PYTHON:-python3}"
        if [ ! -x .venv/bin/python ]; then
            log "creating .venv with $($python --version)"
            if ! "$python" -m venv .venv 2>/dev/null; then
                [ "$(id -u)" -eq 0 ] || { log "python3 -m venv failed: install python3-venv"; exit 1; }
                DEBIAN_FRONTEND=noninteractive apt-get install -y python3-venv >/dev/null
                rm -rf .venv && "$python" -m venv .venv
            fi
        fi
        log "installing requirements"
        .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip 2>&1 \
            | grep -v "is ignored" || true
        .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt 2>&1 \
            | grep -v "is ignored" || true
        .venv/bin/python -c "import django, psycopg, redis, django_redis, pytest_django" \
            || { log "requirements did not install"; exit 1; }
        ;;
    chromium)
        for candidate in "${CHROMIUM_PATH:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
            [ -n "$candidate" ] && [ -x "$candidate" ] && exit 0
        done
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
            log "installing Debian's chromium for the browser tests"
            export DEBIAN_FRONTEND=noninteractive
            apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 \
                || { apt-get update >/dev/null 2>&1; apt-get install -y --no-install-recommends chromium >/dev/null 2>&1; } \
                || log "could not install chromium: browser tests will be skipped"
        else
            log "no chromium binary: browser tests will be skipped (apt-get install chromium)"
        fi
        ;;
    promtool)
        command -v promtool >/dev/null && exit 0
        if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
            log "installing Debian's prometheus package for promtool (make check-deploy)"
            export DEBIAN_FRONTEND=noninteractive
            apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1 \
                || { apt-get update >/dev/null 2>&1; apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1; } \
                || true
        fi
        command -v promtool >/dev/null \
            || { log "no promtool: install Debian's prometheus package (apt-get install prometheus)"; exit 1; }
        ;;
    *) echo "usage: $0 venv|chromium|promtool" >&2; exit 2 ;;
esac
