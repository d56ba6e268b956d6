#!/usr/bin/env bash
# make check-deploy: what operators copy from deploy/ is checked by the tools that read it.
#   1. promtool check rules / test rules on deploy/prometheus (Debian's prometheus package
#      has promtool: scripts/bootstrap.sh promtool installs it when missing, as root)
#   2. systemd-analyze verify on deploy/systemd, with /srv/hoa read as this checkout (the
#      programs the units start must exist) and the gunicorn template as instance 8000;
#      any warning fails. Where systemd-analyze is missing, step 3 still parses the units.
#   3. tests/ops/test_deploy.py: metric names against /metrics, units against the commands.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
log() { printf '[check-deploy] %s\n' "$*" >&2; }
die() { printf '[check-deploy] error: %s\n' "$*" >&2; exit 1; }

scripts/bootstrap.sh promtool
(cd deploy/prometheus && promtool check rules alerts.yml && promtool test rules alerts_test.yml) \
    || die "deploy/prometheus: promtool refused the rules or their tests"

if command -v systemd-analyze >/dev/null; then
    units="$(mktemp -d)"
    trap 'rm -rf "$units"' EXIT
    for file in deploy/systemd/*; do
        sed "s|/srv/hoa|$ROOT|g" "$file" >"$units/$(basename "$file")"
    done
    mv "$units/hoa-gunicorn@.service" "$units/hoa-gunicorn@8000.service"
    # verify exits 0 on a misspelt key or a bad value; it only says so: fail on any output.
    if ! output="$(cd "$units" && systemd-analyze verify --man=no ./*.service ./*.timer 2>&1)" \
        || [ -n "$output" ]; then
        printf '%s\n' "$output" >&2
        die "deploy/systemd: systemd-analyze verify found problems"
    fi
    log "systemd-analyze verify: $(ls deploy/systemd | wc -l) units OK"
else
    log "systemd-analyze not installed: the units are parsed by tests/ops/test_deploy.py only"
fi

scripts/run_pytest.sh tests/ops/test_deploy.py tests/charges/test_metrics_month_start.py -q -p no:cacheprovider
