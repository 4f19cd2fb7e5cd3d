#!/usr/bin/env bash
# scripts/realtier.sh OUT.md: the same agentic load through one router
# replica and through a tier of four, on real processes from bin/ (router
# replicas with real memberlist and Raft, workersims, loadgen), all on
# 127.0.0.1. Writes a Markdown section to OUT.md: the cached-token ratio the
# workers reported in their usage, TTFT, throughput and requests per replica.
#
# Each run starts fresh workersims (empty caches) and fresh replicas (empty
# indexes and registries), so the two runs see the same load from the same
# state. Each round runs one replica, then four; REALTIER_ROUNDS (2) rounds
# show how steady the ratio is. BENCH_QUICK=1 runs fewer sessions, once.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/realtier.sh OUT.md}
quick=${BENCH_QUICK:-0}
workers=8
sessions=${REALTIER_SESSIONS:-64} turns=${REALTIER_TURNS:-20} rounds=${REALTIER_ROUNDS:-2}
[ "$quick" = 1 ] && sessions=16 turns=5 rounds=1
timescale=${REALTIER_TIME_SCALE:-10}
agentic=(--sessions "$sessions" --turns "$turns" --system-prompt-tokens 2048 --task-tokens 512
	--observation-tokens 512 --answer-tokens 32 --think-time 200ms --seed 11 --endpoint chat --duration 10m)
# free_ports N: N loopback ports free for TCP and UDP now (the machine may be
# shared: fixed ports can be taken).
free_ports() {
	python3 - "$1" <<'PY'
import socket, sys
socks, ports = [], []
while len(ports) < int(sys.argv[1]):
    t = socket.socket(); t.bind(("127.0.0.1", 0)); port = t.getsockname()[1]
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.bind(("127.0.0.1", port))
    except OSError:
        t.close(); continue
    socks += [t, u]; ports.append(port)
print(" ".join(map(str, ports)))
PY
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvrouter-realtier.XXXXXX")
pids=()
stop_all() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	pids=()
}
trap 'stop_all; rm -rf "$tmp"' EXIT INT TERM

wait_ready() { # url what
	for _ in $(seq 300); do
		bin/router healthcheck --addr "$1" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	keep=${TMPDIR:-/tmp}/kvrouter-realtier-failed
	rm -rf "$keep" && cp -r "$tmp" "$keep"
	echo "realtier: $2 at $1 never became ready; logs in $keep" >&2
	exit 1
}

start_workers() {
	urls=()
	read -r -a ports <<<"$(free_ports "$workers")"
	for i in $(seq "$workers"); do
		port=${ports[$((i - 1))]}
		bin/workersim --host 127.0.0.1 --port "$port" --worker-id "w$i" --model sim-model \
			--time-scale "$timescale" >"$tmp/workersim-$port.log" 2>&1 &
		pids+=($!)
		urls+=("http://127.0.0.1:$port")
	done
	for u in "${urls[@]}"; do
		for _ in $(seq 100); do curl -sf "$u/health" >/dev/null && break; sleep 0.1; done
	done
}

# start_tier N ROUND: N replicas, each on a data dir of its own for this
# round; the first bootstraps, the others join it.
start_tier() {
	n=$1 round=$2 targets=() apis=()
	read -r -a ports <<<"$(free_ports $((3 * n)))"
	for i in $(seq 0 $((n - 1))); do
		api=${ports[$((3 * i))]} gossip=${ports[$((3 * i + 1))]} raft=${ports[$((3 * i + 2))]}
		join=()
		[ "$i" -gt 0 ] && join=(--join "127.0.0.1:${ports[1]}")
		bin/router serve --host 127.0.0.1 --port "$api" --prometheus-port 0 \
			--node-name "realtier-$n-$i" --data-dir "$tmp/data-$n-$i-$round" \
			--gossip-bind "127.0.0.1:$gossip" --raft-bind "127.0.0.1:$raft" \
			--bootstrap-expect "$n" "${join[@]}" --worker-urls "$(IFS=,; echo "${urls[*]}")" \
			>"$tmp/router-$n-$i-$round.log" 2>&1 &
		pids+=($!)
		apis+=("http://127.0.0.1:$api")
		targets+=(--target "http://127.0.0.1:$api")
	done
	for i in $(seq 0 $((n - 1))); do wait_ready "${apis[$i]}" "replica $i of $n"; done
}

# run N ROUND: a fresh tier of N replicas in front of fresh workers, the
# agentic load across all of them; the report in $tmp/tier-N-ROUND.json.
run() {
	start_workers
	start_tier "$1" "$2"
	bin/loadgen agentic "${targets[@]}" "${agentic[@]}" --json "$tmp/tier-$1-$2.json" >"$tmp/tier-$1-$2.txt"
	stop_all
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq "$rounds"); do
	run 1 "$round"
	run 4 "$round"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$tmp" "$rounds" "$load_before" "$load_after" "${agentic[*]}" "$workers" "$timescale" >"$out" <<'PY'
import json, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
load_before, load_after, agentic, workers, timescale = sys.argv[3:8]
print("## Real processes: one replica against a tier of four\n")
print(f"{workers} workersims (--time-scale {timescale}) behind router replicas started from bin/ on 127.0.0.1, "
      "each with its own memberlist and Raft; the tier of four formed a cluster and took the load "
      "through all four (loadgen picks a random replica per request, as a load balancer would). "
      "Fresh workers and replicas for each run. Cached tokens are what the workers reported in each "
      "response's usage.prompt_tokens_details.cached_tokens.\n")
print("```\nscripts/realtier.sh OUT.md   # part of make bench\n"
      f"bin/loadgen agentic --target URL [--target URL ...] {agentic}\n```\n")
print(f"Load average (1, 5, 15 min) before: {load_before}; after: {load_after}.\n")
print("| round | replicas | requests | errors | cached-token ratio | turns 2+ cached | vs one replica | TTFT p50 / p99 ms | req/s | failovers | requests per replica |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for k in range(1, rounds + 1):
    one = json.load(open(f"{tmp}/tier-1-{k}.json"))
    for n in (1, 4):
        r = json.load(open(f"{tmp}/tier-{n}-{k}.json"))
        per = ", ".join(str(v) for _, v in sorted((r.get("per_target") or {r["target"]: r["requests"]}).items()))
        print(f"| {k} | {n} | {r['requests']} | {r['errors']} | {r['cached_token_ratio']:.3f} | {r.get('followup_cached_token_ratio', 0):.3f} | "
              f"{r['cached_token_ratio'] / one['cached_token_ratio']:.3f} | {r['ttft_p50_ms']:.0f} / {r['ttft_p99_ms']:.0f} | "
              f"{r['throughput_rps']:.2f} | {r.get('failovers', 0)} | {per} |")
PY
echo "wrote $out"
