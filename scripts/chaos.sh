#!/usr/bin/env bash
# make chaos: start the compose cluster (3 routers, 4 workersims) on a private
# network and run the scenarios of chaos/ against it, then tear it down.
set -euo pipefail
cd "$(dirname "$0")/.."
dc() { docker-compose -f docker-compose.yml "$@"; }
# The replicas bind beyond loopback, so they refuse to start without cluster
# TLS: a CA and a certificate per replica, made fresh for each run. The keys
# are throwaway and made readable to whatever uid the containers run as.
rm -rf .cluster-tls
bin/router tls init .cluster-tls r1 r2 r3 >/dev/null
chmod 0755 .cluster-tls && chmod 0644 .cluster-tls/r?-key.pem
trap 'dc logs --no-color >chaos.log 2>&1 || true; dc down -v --remove-orphans >/dev/null 2>&1 || true' EXIT
dc up -d --build
go test -tags chaos -count=1 -v -timeout 15m ./chaos/
