#!/usr/bin/env bash
# make chaos: start the compose cluster (3 routers, 4 workersims) on a private
# network and run the scenarios of chaos/ against it, then tear it down.
# CHAOS_RUN selects scenarios (a go test -run pattern, default all of them);
# CHAOS_REPORT, when set, is where the figures of every scenario are written
# as a markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
# Either Compose: the plugin (docker compose) or the standalone v1 binary.
if docker compose version >/dev/null 2>&1; then
	COMPOSE="docker compose"
elif command -v docker-compose >/dev/null 2>&1; then
	COMPOSE="docker-compose"
else
	echo "chaos: neither 'docker compose' nor 'docker-compose' is installed" >&2
	exit 1
fi
export CHAOS_COMPOSE="$COMPOSE"
dc() { $COMPOSE -f docker-compose.yml -p kvrouter-chaos "$@"; }
# The replicas bind beyond loopback, so they refuse to start without cluster
# TLS: a CA and a certificate per replica, made fresh for each run. The keys
# are throwaway and made readable to whatever uid the containers run as.
rm -rf .cluster-tls
bin/router tls init .cluster-tls r1 r2 r3 >/dev/null
chmod 0755 .cluster-tls && chmod 0644 .cluster-tls/r?-key.pem
trap 'dc logs --no-color >chaos.log 2>&1 || true; dc down -v --remove-orphans >/dev/null 2>&1 || true' EXIT
dc down -v --remove-orphans >/dev/null 2>&1 || true
dc up -d --build
go test -tags chaos -count=1 -v -timeout 40m -run "${CHAOS_RUN:-.}" ./chaos/
