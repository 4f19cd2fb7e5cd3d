#!/usr/bin/env bash
# scripts/realtier.sh OUT.md: the same agentic load through one router
# replica and through a tier of four, on real processes from bin/ (router
# replicas with real memberlist and Raft, workersims, loadgen), all on
# 127.0.0.1. Writes a Markdown section to OUT.md: the cached-token ratio the
# workers reported in their usage, TTFT, throughput and requests per replica.
#
# Each run starts fresh workersims (empty caches) and fresh replicas (empty
# indexes and registries), so the two runs see the same load from the same
# state. BENCH_QUICK=1 runs fewer sessions.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/realtier.sh OUT.md}
quick=${BENCH_QUICK:-0}
workers=8
sessions=${REALTIER_SESSIONS:-64} turns=${REALTIER_TURNS:-10}
[ "$quick" = 1 ] && sessions=16 turns=5
timescale=${REALTIER_TIME_SCALE:-20}
agentic=(--sessions "$sessions" --turns "$turns" --system-prompt-tokens 2048 --task-tokens 512
	--observation-tokens 512 --answer-tokens 32 --think-time 200ms --seed 11 --endpoint chat --duration 10m)
base_api=18000 base_worker=18100 base_gossip=18200 base_raft=18300

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
	echo "realtier: $2 at $1 never became ready; logs in $tmp" >&2
	exit 1
}

start_workers() {
	urls=()
	for i in $(seq "$workers"); do
		port=$((base_worker + i))
		bin/workersim --host 127.0.0.1 --port "$port" --worker-id "w$i" --model sim-model \
			--time-scale "$timescale" >"$tmp/workersim-$port.log" 2>&1 &
		pids+=($!)
		urls+=("http://127.0.0.1:$port")
	done
	for u in "${urls[@]}"; do
		for _ in $(seq 100); do curl -sf "$u/health" >/dev/null && break; sleep 0.1; done
	done
}

# start_tier N: N replicas; the first bootstraps, the others join it.
start_tier() {
	n=$1 targets=()
	for i in $(seq 0 $((n - 1))); do
		join=()
		[ "$i" -gt 0 ] && join=(--join "127.0.0.1:$base_gossip")
		bin/router serve --host 127.0.0.1 --port $((base_api + i)) --prometheus-port 0 \
			--node-name "realtier-$n-$i" --data-dir "$tmp/data-$n-$i" \
			--gossip-bind "127.0.0.1:$((base_gossip + i))" --raft-bind "127.0.0.1:$((base_raft + i))" \
			--bootstrap-expect "$n" "${join[@]}" --worker-urls "$(IFS=,; echo "${urls[*]}")" \
			>"$tmp/router-$n-$i.log" 2>&1 &
		pids+=($!)
		targets+=(--target "http://127.0.0.1:$((base_api + i))")
	done
	for i in $(seq 0 $((n - 1))); do wait_ready "http://127.0.0.1:$((base_api + i))" "replica $i of $n"; done
}

# run N: a fresh tier of N replicas in front of fresh workers, the agentic
# load across all of them; the report in $tmp/tier-N.json.
run() {
	start_workers
	start_tier "$1"
	bin/loadgen agentic "${targets[@]}" "${agentic[@]}" --json "$tmp/tier-$1.json" >"$tmp/tier-$1.txt"
	stop_all
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
run 1
run 4
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$tmp/tier-1.json" "$tmp/tier-4.json" "$load_before" "$load_after" "${agentic[*]}" "$workers" "$timescale" >"$out" <<'PY'
import json, sys
one, four = (json.load(open(p)) for p in sys.argv[1:3])
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
print("| replicas | requests | errors | cached-token ratio | turns 2+ cached | vs one replica | TTFT p50 / p99 ms | req/s | failovers | requests per replica |")
print("|---|---|---|---|---|---|---|---|---|---|")
for n, r in ((1, one), (4, four)):
    per = ", ".join(str(v) for _, v in sorted((r.get("per_target") or {r["target"]: r["requests"]}).items()))
    print(f"| {n} | {r['requests']} | {r['errors']} | {r['cached_token_ratio']:.3f} | {r.get('followup_cached_token_ratio', 0):.3f} | "
          f"{r['cached_token_ratio'] / one['cached_token_ratio']:.3f} | {r['ttft_p50_ms']:.0f} / {r['ttft_p99_ms']:.0f} | "
          f"{r['throughput_rps']:.2f} | {r.get('failovers', 0)} | {per} |")
PY
echo "wrote $out"
