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

args=(--host 127.0.0.1 --node-name "make-run-$mode") # the default ports: API 30000, metrics 29000
if [ "$mode" = cluster ]; then
	# The replicas talk as a real cluster would: gossip encrypted with a
	# fresh key, Raft and forwarded writes over mutual TLS with certificates
	# made for this run (see `router tls init`).
	tls=$(mktemp -d "${TMPDIR:-/tmp}/kvrouter-run-cluster.XXXXXX")
	trap 'cleanup; rm -rf "$tls"' INT TERM EXIT
	bin/router tls init "$tls" make-run-cluster make-run-cluster-1 make-run-cluster-2 >/dev/null
	key=$(head -c 32 /dev/urandom | base64)
	secure() { # node name
		echo --gossip-key "$key" --cluster-tls-ca "$tls/ca.pem" \
			--cluster-tls-cert "$tls/$1.pem" --cluster-tls-key "$tls/$1-key.pem"
	}
	worker 8001 both; worker 8002 both; worker 8003 both
	for i in 1 2; do # two more replicas; the one started below is the third
		# shellcheck disable=SC2046 # secure's words are flags and paths without spaces
		bin/router serve --host 127.0.0.1 --port $((30000 + i)) --prometheus-port $((29000 + i)) --node-name "make-run-cluster-$i" \
			--gossip-bind 127.0.0.1:$((7946 + 10 * i)) --raft-bind 127.0.0.1:$((7947 + 10 * i)) \
			--bootstrap-expect 3 --join 127.0.0.1:7946 --miss-placement rendezvous $(secure "make-run-cluster-$i") &
		pids+=($!)
	done
	# shellcheck disable=SC2207
	args+=(--bootstrap-expect 3 --join 127.0.0.1:7956 --miss-placement rendezvous $(secure make-run-cluster)
		--worker-urls http://127.0.0.1:8001,http://127.0.0.1:8002,http://127.0.0.1:8003)
elif [ "$mode" = pd ]; then
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
	bin/router healthcheck --addr http://127.0.0.1:30000 >/dev/null 2>&1 && break
	sleep 0.1
done
[ "$mode" = cluster ] && echo "Three replicas: http://127.0.0.1:30000, :30001 and :30002 (see: bin/router cluster status)."
cat <<'TXT'

The router listens on http://127.0.0.1:30000. Try:

  curl -s http://127.0.0.1:30000/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"sim-model","messages":[{"role":"user","content":"Hello!"}],"max_tokens":16}'

  curl -s http://127.0.0.1:30000/get_loads      # in-flight load per worker
  bin/router workers list                      # the registry

Ctrl-C stops the router and the workers.
TXT
wait "${pids[@]}"
