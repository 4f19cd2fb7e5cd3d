#!/usr/bin/env bash
# Starts a router on the embedded default (a one-node cluster in the default
# data dir) in front of workersim processes on loopback, prints a curl to try,
# and stops everything on Ctrl-C.
set -euo pipefail
mode=${1:-regular}
cd "$(dirname "$0")/.."
pids=()
cleanup() {
	trap - INT TERM EXIT
	kill "${pids[@]}" 2>/dev/null || true
	wait 2>/dev/null || true
}
trap cleanup INT TERM EXIT

worker() { # port role
	bin/workersim --host 127.0.0.1 --port "$1" --worker-id "sim-$1" --model sim-model --role "$2" \
		>"${TMPDIR:-/tmp}/workersim-$1.log" 2>&1 &
	pids+=($!)
}

args=(--host 127.0.0.1 --port 8080 --node-name "make-run-$mode")
if [ "$mode" = pd ]; then
	worker 8101 prefill; worker 8102 prefill; worker 8201 decode; worker 8202 decode
	args+=(--vllm-pd-disaggregation --prefill http://127.0.0.1:8101 --prefill http://127.0.0.1:8102
		--decode http://127.0.0.1:8201 --decode http://127.0.0.1:8202)
else
	worker 8001 both; worker 8002 both; worker 8003 both
	args+=(--worker-urls http://127.0.0.1:8001,http://127.0.0.1:8002,http://127.0.0.1:8003)
fi
bin/router serve "${args[@]}" &
pids+=($!)

for _ in $(seq 100); do
	bin/router healthcheck --addr http://127.0.0.1:8080 >/dev/null 2>&1 && break
	sleep 0.1
done
cat <<'TXT'

The router listens on http://127.0.0.1:8080. Try:

  curl -s http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"sim-model","messages":[{"role":"user","content":"Hello!"}],"max_tokens":16}'

  curl -s http://127.0.0.1:8080/get_loads      # in-flight load per worker
  bin/router workers list                      # the registry

Ctrl-C stops the router and the workers.
TXT
wait "${pids[@]}"
