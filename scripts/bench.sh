#!/usr/bin/env bash
# make bench: measures what the router does to a fleet and what it costs, and
# writes BENCHMARKS.md with the tables and the commands that made them.
#   1. selection cost per request at 16/256/2048 workers (go test -bench)
#   2. fleet simulations (fleetsim) on the shared trace, agentic sessions and
#      the prefill/decode seed scenario
#   3. router overhead on real processes: loadgen -> workersim directly,
#      through the router, and through nginx as the plain-proxy reference
# Everything listens on 127.0.0.1 only. BENCH_QUICK=1 shortens every part.
set -euo pipefail
cd "$(dirname "$0")/.."
out=BENCHMARKS.md
tmp=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
quick=${BENCH_QUICK:-0}
trace=${TRACE:-../shared/data/traces/mooncake_conversation_trace.jsonl}

section() { printf '\n## %s\n\n' "$1" >>"$out"; }
cmdline() { printf '```\n%s\n```\n\n' "$*" >>"$out"; }

{
	echo "# Benchmarks"
	echo
	echo "Made by \`make bench\` on $(date -u +%Y-%m-%d), $(nproc) cores, $(go version | cut -d' ' -f3)."
	echo "Rerun any table with the command above it."
} >"$out"

# 1. Selection cost ----------------------------------------------------------
section "Selection cost per request"
bench="go test -run '^\$' -bench 'BenchmarkSelect|BenchmarkPrepare' -benchmem -count 5 ./affinity/"
cmdline "$bench"
eval "$bench" | tee "$tmp/select.txt" >/dev/null
awk '
/^BenchmarkSelect\// {
	split($1, p, "/"); pol = p[2]; sub(/workers=/, "", p[3]); sub(/-[0-9]+$/, "", p[3]); w = p[3]
	ns[pol, w] += $3; n[pol, w]++; alloc[pol, w] = $7; ws[w] = 1
}
/^BenchmarkPrepare/ { prep += $3; pn++ }
END {
	print "| workers | round_robin ns/op | cache_aware ns/op | cache_aware allocs/op | marginal cost incl. hashing (ms) |"
	print "|---|---|---|---|---|"
	split("16 256 2048", order, " ")
	for (i = 1; i <= 3; i++) {
		w = order[i]
		rr = ns["round_robin", w] / n["round_robin", w]; ca = ns["cache_aware", w] / n["cache_aware", w]
		printf "| %s | %.0f | %.0f | %s | %.4f |\n", w, rr, ca, alloc["cache_aware", w], (ca - rr + prep / pn) / 1e6
	}
	printf "\nHashing a 4 KiB routing text (BenchmarkPrepare): %.0f ns.\n", prep / pn
}' "$tmp/select.txt" >>"$out"

# 2. Fleet simulations -------------------------------------------------------
# fleetsim writes {"runs":[...]}; table renders the columns that matter.
table() {
	python3 - "$1" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
cols = ["policy", "replicas", "sync", "hit_rate", "ttft_p50_ms", "ttft_p99_ms", "throughput_rps", "load_cv", "prefill_tokens", "gossip_bytes_per_sec"]
print("| " + " | ".join(cols) + " |")
print("|" + "---|" * len(cols))
for r in runs:
    cells = []
    for c in cols:
        v = r.get(c, "")
        cells.append(("%.4g" % v) if isinstance(v, float) else str(v))
    print("| " + " | ".join(cells) + " |")
PY
}
if [ -x bin/fleetsim ]; then
	limit="" sessions=256
	[ "$quick" = 1 ] && limit="--limit 2000" && sessions=64
	policies=round_robin,least_load,consistent_hash,cache_aware_fleet_gate,cache_aware,cache_aware:rendezvous
	section "Fleet simulation: the shared conversation trace, 16 workers"
	echo "Infinite-cache bound of the trace: 0.374 of tokens. hit_rate is token-weighted, as the workers' caches saw it." >>"$out"
	echo >>"$out"
	run="bin/fleetsim --trace $trace $limit --workers 16 --replicas 1,2,4,8 --sync none,gossip,shared --policies $policies --parallel 2"
	cmdline "$run"
	$run --json "$tmp/trace.json" >/dev/null
	table "$tmp/trace.json" >>"$out"
	section "Fleet simulation: agentic sessions, 16 workers"
	run="bin/fleetsim --agentic --sessions $sessions --turns 20 --workers 16 --replicas 1,2,4,8 --sync none,gossip,shared --policies $policies --parallel 2"
	cmdline "$run"
	$run --json "$tmp/agentic.json" >/dev/null
	table "$tmp/agentic.json" >>"$out"
	section "Fleet simulation: the seed's P/D scenario (4 prefill / 6 decode, agentic rollouts, one prefill worker 4x slower)"
	echo "hit_rate is the prefill workers'." >>"$out"
	echo >>"$out"
	run="bin/fleetsim --agentic --pd 4:6 --sessions 1024 --groups 128 --observation-spread 1 --system-prompt-tokens 4096 --task-tokens 64 --observation-tokens 1024 --answer-tokens 128 --think-time 1s --turns 20 --kv-capacity-tokens 8388608 --slowdown 1:4 --policies cache_aware_fleet_gate,cache_aware --replicas 1,4 --sync gossip --parallel 2"
	[ "$quick" = 1 ] && run=${run/--sessions 1024 --groups 128/--sessions 128 --groups 16}
	cmdline "$run"
	$run --json "$tmp/pd.json" >/dev/null
	table "$tmp/pd.json" >>"$out"
fi

# 3. Router overhead ---------------------------------------------------------
if ! command -v nginx >/dev/null 2>&1; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null
fi
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wport=$(port); rport=$(port); nport=$(port)
bin/workersim --port "$wport" --worker-id bench --time-scale 1000 --max-num-seqs 1024 >"$tmp/workersim.log" 2>&1 &
pids+=($!)
bin/router serve --port "$rport" --raft-bind 127.0.0.1:0 --gossip-bind 127.0.0.1:0 --data-dir "$tmp/router" \
	--node-name bench --log-level warn --worker-urls "http://127.0.0.1:$wport" >"$tmp/router.log" 2>&1 &
pids+=($!)
cat >"$tmp/nginx.conf" <<NGINX
worker_processes auto;
pid $tmp/nginx.pid;
error_log $tmp/nginx-error.log;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path $tmp; proxy_temp_path $tmp;
	client_max_body_size 512m;
	upstream workersim { server 127.0.0.1:$wport; keepalive 256; }
	server {
		listen 127.0.0.1:$nport;
		location / {
			proxy_pass http://workersim;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering off;
		}
	}
}
NGINX
nginx -c "$tmp/nginx.conf" -g 'daemon off;' &
pids+=($!)
for _ in $(seq 100); do
	bin/router healthcheck --addr "http://127.0.0.1:$rport" >/dev/null 2>&1 && break
	sleep 0.1
done
sessions=64 turns=40
[ "$quick" = 1 ] && turns=10
section "Router overhead on real processes"
echo "One workersim (--time-scale 1000) behind nothing, the router and nginx (a worker process per core," >>"$out"
echo "proxy_buffering off), driven by the same closed-loop agentic load: $sessions sessions x $turns turns," >>"$out"
echo "streamed, 4 output tokens. Ratios are against the direct run." >>"$out"
echo >>"$out"
echo "| path | throughput (req/s) | TTFT p50 (ms) | TTFT p99 (ms) | throughput vs direct |" >>"$out"
echo "|---|---|---|---|---|" >>"$out"
for path in direct:$wport router:$rport nginx:$nport; do
	name=${path%%:*} p=${path##*:}
	bin/loadgen agentic --target "http://127.0.0.1:$p" --model sim-model --sessions $sessions --turns $turns \
		--think-time 0 --answer-tokens 4 --json "$tmp/$name.json" >/dev/null 2>&1
done
direct=$(python3 -c "import json;print(json.load(open('$tmp/direct.json'))['throughput_rps'])")
for name in direct router nginx; do
	python3 - "$tmp/$name.json" "$name" "$direct" >>"$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("| %s | %.0f | %.2f | %.2f | %.2f |" % (sys.argv[2], r["throughput_rps"], r["ttft_p50_ms"], r["ttft_p99_ms"], r["throughput_rps"] / float(sys.argv[3])))
PY
done
python3 - "$tmp" >>"$out" <<'PY'
import json, sys
r = {n: json.load(open("%s/%s.json" % (sys.argv[1], n))) for n in ("direct", "router", "nginx")}
print()
print("Router throughput / nginx throughput: %.2f. Latency added to TTFT over the direct run: router p50 %+.1f ms, p99 %+.1f ms; nginx p50 %+.1f ms, p99 %+.1f ms." % (
    r["router"]["throughput_rps"] / r["nginx"]["throughput_rps"],
    r["router"]["ttft_p50_ms"] - r["direct"]["ttft_p50_ms"], r["router"]["ttft_p99_ms"] - r["direct"]["ttft_p99_ms"],
    r["nginx"]["ttft_p50_ms"] - r["direct"]["ttft_p50_ms"], r["nginx"]["ttft_p99_ms"] - r["direct"]["ttft_p99_ms"]))
print("All three processes and the load generator share the machine's cores.")
print()
PY
cmdline "make bench   # section 3 is scripts/bench.sh; loadgen agentic --sessions $sessions --turns $turns --think-time 0 --answer-tokens 4"
echo "wrote $out"
