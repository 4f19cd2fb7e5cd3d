#!/usr/bin/env bash
# make chaos: start the compose cluster (3 routers, 4 workersims) on a private
# network and run the scenarios of chaos/ against it, then tear it down.
set -euo pipefail
cd "$(dirname "$0")/.."
dc() { docker-compose -f docker-compose.yml "$@"; }
trap 'dc logs --no-color >chaos.log 2>&1 || true; dc down -v --remove-orphans >/dev/null 2>&1 || true' EXIT
dc up -d --build
go test -tags chaos -count=1 -v -timeout 15m ./chaos/
