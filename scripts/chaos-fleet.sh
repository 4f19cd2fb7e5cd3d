#!/usr/bin/env bash
# make chaos-fleet: chaos at fleet scale. Writes chaos/fleet/docker-compose.yml (8 router
# replicas, 64 workersims, one container each, on a private network), makes the replicas'
# cluster TLS and runs chaos/fleet's scenarios, which start that fleet and tear it down (volumes
# and network too) however they end. CHAOS_RUN selects scenarios (a go test -run pattern),
# CHAOS_FLEET_ROUNDS how often each runs (default 1), CHAOS_REPORT where the table goes;
# CHAOS_FLEET_SESSIONS, CHAOS_FLEET_THINK_MS and CHAOS_FLEET_MAX_TOKENS shape the load (16
# agentic sessions, 250 ms between turns, 32 tokens a turn). Needs Docker, Compose (the plugin
# or docker-compose v1), nsenter and iptables, as root.
set -euo pipefail
cd "$(dirname "$0")/.."
if docker compose version >/dev/null 2>&1; then
	COMPOSE="docker compose"
elif command -v docker-compose >/dev/null 2>&1; then
	COMPOSE="docker-compose"
else
	echo "chaos-fleet: neither 'docker compose' nor 'docker-compose' is installed" >&2
	exit 1
fi
export CHAOS_COMPOSE="$COMPOSE" KVROUTER_CHAOS_FLEET=1
scripts/chaos-fleet-compose.sh chaos/fleet/docker-compose.yml
tls=chaos/fleet/.cluster-tls
rm -rf "$tls"
bin/router tls init "$tls" r1 r2 r3 r4 r5 r6 r7 r8 >/dev/null
chmod 0755 "$tls" && chmod 0644 "$tls"/r*-key.pem
# The test tears the fleet down itself; this is for a test binary that was killed.
trap '(cd chaos/fleet && $COMPOSE -f docker-compose.yml -p kvrouter-chaos-fleet down -v --remove-orphans -t 5 >/dev/null 2>&1) || true' EXIT
go test -tags chaos -count=1 -v -timeout 60m -run "TestChaosFleet/${CHAOS_RUN:-.}" ./chaos/fleet/
