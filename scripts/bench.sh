#!/usr/bin/env bash
# make bench: measures what the router does to a fleet and what it costs, and
# writes BENCHMARKS.md with the tables and the commands that made them.
#   1. selection cost per request at 16/256/2048 workers (go test -bench)
#   2. fleet simulations (fleetsim) on the shared trace, agentic sessions and
#      the prefill/decode seed scenario
#   3. the proxy path against nginx, HAProxy and fasthttp's own HostClient:
#      throughput, tail latency and streaming relay behind an instant
#      upstream, and the syscalls and allocations per request
#      (scripts/proxybench, budget.sh)
#   4. the gossip budget: bytes per replica, merged-load lag and memory at
#      8/32/64 replicas x 16/256/1024 workers, every report full against
#      deltas (loadsync's TestGossipBudget, on virtual time)
#   5. real processes: the tier sweep (1, 4 and 8 replicas against one, with
#      fleetsim beside it) and a burst sharing one prefix (scripts/realtier.sh)
#   6. admission on real processes: an interactive stream under a bulk flood,
#      two tenants through a tier of four, the saturation signal
#      (scripts/prioritybench)
# Parts 4, 5 and 6 are written before part 3's section.
# Everything listens on 127.0.0.1 only. BENCH_QUICK=1 shortens every part;
# `scripts/bench.sh proxy` (make bench-proxy) reruns part 3 alone and
# replaces its section of BENCHMARKS.md; `scripts/bench.sh gossip` and
# `scripts/bench.sh realtier` do the same for parts 4 and 5; `scripts/bench.sh
# lora` writes the LoRA adapters' section (scripts/lorabench.py: residency
# against adapter-blind routing, on llm-d-inference-sim and workersim).
set -euo pipefail
cd "$(dirname "$0")/.."
out=BENCHMARKS.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
quick=${BENCH_QUICK:-0}
if [ "$quick" = 1 ]; then
	export BENCH_DURATION=${BENCH_DURATION:-3s} BENCH_ROUNDS=${BENCH_ROUNDS:-1} BENCH_STREAM_DURATION=${BENCH_STREAM_DURATION:-2s}
fi

# proxy: only part 3, spliced into the existing BENCHMARKS.md in place of
# its old section.
if [ "${1:-}" = proxy ]; then
	scripts/proxybench/run.sh "$tmp/proxy.md"
	python3 - "$out" "$tmp/proxy.md" <<'PY'
import sys
out, new = sys.argv[1], open(sys.argv[2]).read()
text = open(out).read()
# The proxy section runs from its heading to the next section's: the ones
# after it stay.
new = new.rstrip("\n") + "\n\n"
for heading in ("## Proxy path against nginx and HAProxy", "## Router overhead on real processes"):
    if heading in text:
        start = text.index(heading)
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + new + (text[end + 1:] if end >= 0 else "")
        break
else:
    text = text.rstrip("\n") + "\n\n" + new
open(out, "w").write(text)
PY
	echo "wrote the proxy section of $out"
	exit 0
fi

# gossip_budget OUT.md: part 4's section.
gossip_budget() {
	local seconds=10 sizes="" real="8x16,8x256,8x1024"
	[ "$quick" = 1 ] && seconds=3 sizes=8x16,8x1024,64x1024 real=8x16
	local run="LOADSYNC_BUDGET=1 LOADSYNC_BUDGET_SECONDS=$seconds ${sizes:+LOADSYNC_BUDGET_SIZES=$sizes }go test -run TestGossipBudget -count=1 -v -timeout 60m ./loadsync/"
	local check="LOADSYNC_BUDGET_REAL=1 LOADSYNC_BUDGET_REAL_SIZES=$real go test -run TestGossipBudgetOnMemberlist -count=1 -v -timeout 30m ./loadsync/"
	{
		printf '## Gossip budget: bytes per replica, merged-load lag and memory\n\n'
		cat <<'TXT'
What each replica sends its peers, at 8, 32 and 64 replicas x 16, 256 and 1024 workers, with every
worker holding about 64 requests (10 s each on average, so the fleet's request rate grows with the
workers, not the replicas). "full" sends every load report full, every 100 ms, as replicas did before
delta reports; "delta" is the default: a full report once a second (twice), cumulative deltas
between. Full reports cost replicas x workers per replica; deltas cost what changes, which is the
fleet's request rate split over the replicas, so their bytes per replica stay about flat as replicas
are added. The digests (prefix ownership) cost the fleet's decision rate, whatever the replica count.

Every replica's real loadsync State (encoder, merge, digests) runs on virtual time over a network
that delays each packet 0.2-2.2 ms (so packets overtake each other) and loses 1% of them; one
replica also feeds a real ownership index (the router's default --max-tree-size). Real memberlist
cannot carry 64 replicas x 1024 workers on two shared cores in real time, so the second table checks
the same load on 8 real memberlist nodes over loopback. The merged-load lag is measured against the
ground truth: at a random worker of a replica, the largest over the other replicas of how long ago
that replica's count last equalled what this one believes it is (one interval, 100 ms, between
reports is the floor of the p99; the max is a replica that lost both copies of a full report and
waited for the next). The load table is the peers' counts one replica holds: a fixed cost per peer
(two small maps) plus at most two entries per request in flight (every non-zero count is at least
one request), whatever the replica count. The index is one replica's ownership index: it learns
every replica's decisions, sparsely, so it does not grow with the replicas. "on the wire" adds 34 bytes a packet (memberlist's framing and UDP/IPv4), without
encryption (29 more a packet with --gossip-key).
TXT
		printf '\nLoad average at the start: %s.\n\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
		printf '```\n%s\n```\n\n' "$run"
		eval "$run" | grep -E '^(\||Per replica|$)' | cat -s
		printf '\nOn real memberlist over loopback (8 replicas, 10 s per run, the same load in real time; the report lag is the State'"'"'s own: receive time minus the send time of the newest report its view equals, at each accepted packet). Load average at the start: %s.\n\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
		printf '```\n%s\n```\n\n' "$check"
		eval "$check" | grep -E '^\|'
	} >"$1"
}

# splice SECTION.md HEADING: put the section in BENCHMARKS.md in place of the
# one under HEADING, or before the proxy section when there is none.
splice() {
	python3 - "$out" "$1" "$2" <<'PY'
import sys
out, new, heading = sys.argv[1], open(sys.argv[2]).read().rstrip("\n") + "\n\n", sys.argv[3]
text = open(out).read()
if heading in text:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    text = text[:start] + new + (text[end + 1:] if end >= 0 else "")
else:
    anchor = "## Proxy path against nginx and HAProxy"
    at = text.index(anchor) if anchor in text else len(text)
    text = text[:at] + new + text[at:]
open(out, "w").write(text)
PY
}
# admission_bench OUT.md: part 6's sections, from real router and
# workersim processes (bin/), scaled to two shared cores.
admission_bench() {
	local run="go run ./scripts/prioritybench priority tenants saturation"
	[ "$quick" = 1 ] && run="go run ./scripts/prioritybench -quick priority tenants saturation"
	{
		printf '## Admission on real processes

'
		printf 'Measured on two cores shared with other work (the load average is given per run), so the
'
		printf 'engines are slowed down (workersim --time-scale) and the loads kept small enough that the
'
		printf 'router is not what is CPU-bound. Reproduce with:

'
		printf '```
%s
```

' "$run"
		eval "$run" | sed 's/^## /### /'
		admission_engine_floor
		admission_queue_leave
	} >"$1"
}
# admission_engine_floor: what the engine itself allows in the priority
# scenario, on virtual time (sim), with each router rule played around it.
admission_engine_floor() {
	local figures="SIM_PRIORITY_FIGURES=1 go test -count=1 -run TestPriorityFigures -v ./sim/"
	cat <<EOF
### Admission: what the engine itself allows, on virtual time

The same scenario on the engine workersim runs (sim), with no machine noise and no router cost:
one engine under vLLM v1's priority scheduling (its queue by priority, no preemption for a waiting
request), the router's rule of each mechanism played around it, each mechanism alone. The
interactive client thinks 90-110 ms (drawn per seed) and the first bulk requests ask for a quarter
to all of the 256 tokens, so that bulk slots do not free in step. "waiting for the step in
progress" runs from the interactive request's arrival to the end of the step the engine was
running; the rest is its wait for a slot and its own step, a prefill of its prompt beside the bulk
decodes. The router aborts are played here only (the router has neither): "restarts" sends the
aborted request again from the start, cutting its client's stream if it had begun; "resumes" sends
its prompt and the tokens it had (the router splicing the streams), as vLLM's own recompute
preemption would. The last row gives the reserved slot an engine slot of its own: an engine of 5
with bulk held to 4, which is the kept-idle rule on a larger engine, not bulk using the reserved
slot. Reproduce with:

\`\`\`
$figures
\`\`\`

EOF
	local out
	out=$(eval "$figures")
	grep '^|' <<<"$out"
	printf '\n'
	grep '^The floor' <<<"$out"
	printf '\n'
}
# admission_queue_leave: how soon a client that leaves while queued frees
# its place (scripts/queueleave.py, real processes).
admission_queue_leave() {
	local leave="python3 scripts/queueleave.py bin/router bin/workersim 20"
	printf '### Admission: a client that leaves while queued\n\n'
	printf 'One slot (--max-concurrent-requests 1) held by a long stream; a second request queues and its\n'
	printf 'client closes the connection after 300 ms. How long after the close the router freed its place:\n\n'
	printf '```\n%s\n```\n\n' "$leave"
	printf 'Load average (1, 5, 15 min) at the start: %s.\n\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
	eval "$leave"
	printf '\n'
}
admission_heading="## Admission on real processes"
if [ "${1:-}" = admission ]; then
	admission_bench "$tmp/admission.md"
	splice "$tmp/admission.md" "$admission_heading"
	echo "wrote the admission section of $out"
	exit 0
fi
# kvevents_bench OUT.md: routing on the engines' KV events: the acceptance
# bench on real processes (scripts/kvbench.py: text index, KV events and an
# oracle, through 1, 4 and 8 replicas, under KV pressure), once per engine
# and topology of KVBENCH_CONFIGS (engine:topology; llm-d-inference-sim is
# skipped, and said so, when `make peers` has not built it), then the event
# index's memory per worker, the subscriber's CPU per 1,000 events a second
# and the lookup per request. KVBENCH_BEFORE=<rev> adds that revision's
# router side by side.
kvevents_bench() {
	local memory="go test -run '^\$' -bench SetMemoryPerWorker -benchtime 1x ./kvevents/"
	local cpu="go test -run '^\$' -bench StreamCPUPer1000Events -benchtime 20000x -count 3 ./kvevents/"
	local lookup="go test -run '^\$' -bench LookupPerRequest -benchtime 2000x -count 3 ./kvevents/"
	local configs=${KVBENCH_CONFIGS:-"sim:bind workersim:bind workersim:dial"}
	local sim=${KVROUTER_PEER_SIM:-${PEER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvrouter/peers}/llm-d-inference-sim}
	export KVBENCH_REPLICAS=${KVBENCH_REPLICAS:-1 4 8}
	if [ "$quick" = 1 ]; then
		export KVBENCH_ROUNDS=${KVBENCH_ROUNDS:-1} KVBENCH_WORKERS=${KVBENCH_WORKERS:-4} KVBENCH_SESSIONS=${KVBENCH_SESSIONS:-32} KVBENCH_TURNS=${KVBENCH_TURNS:-4}
	fi
	{
		printf '%s\n\n' "$kvevents_heading"
		printf 'Each replica routes on the KV events its engines publish (`--kv-events`), against the text\n'
		printf 'index alone and an oracle that asks the engines at decision time, on real processes; one\n'
		printf 'subsection per engine and topology (`scripts/bench.sh kvevents`; KVBENCH_CONFIGS picks them).\n\n'
	} >"$1"
	local c
	for c in $configs; do
		if [ "${c%%:*}" = sim ] && [ ! -x "$sim" ]; then
			printf '### KV events: %s topology, sim\n\nNot run: llm-d-inference-sim is not built (`make peers`).\n\n' "${c#*:}" >>"$1"
			continue
		fi
		KVBENCH_ENGINE=${c%%:*} KVBENCH_TOPOLOGY=${c#*:} python3 scripts/kvbench.py "$tmp/kvevents-$c.md"
		cat "$tmp/kvevents-$c.md" >>"$1"
	done
	{
		printf 'The event index per worker (64 Ki blocks of 16 tokens; the sets are independent, so 1,024\n'
		printf 'workers hold 1,024 times one), the CPU of decoding and applying a worker'"'"'s batches per\n'
		printf '1,000 events a second, sockets aside, and the lookup of one request (the keys of a\n'
		printf '4,096-token prompt and its match on 8 workers'"'"' sets). Wall-clock time on a shared machine:\n'
		printf 'upper bounds; the allocations are exact. Load average at the start: %s.\n\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
		printf '```\n%s\n%s\n%s\n' "$memory" "$cpu" "$lookup"
		{ eval "$memory" && eval "$cpu" && eval "$lookup"; } 2>&1 | grep -E '^Benchmark'
		printf '```\n'
	} >>"$1"
}
kvevents_heading="## Routing on the engines' KV events"
if [ "${1:-}" = kvevents ]; then
	kvevents_bench "$tmp/kvevents.md"
	splice "$tmp/kvevents.md" "$kvevents_heading"
	echo "wrote the KV-events section of $out"
	exit 0
fi
lora_heading="## LoRA adapters: residency against adapter-blind routing"
if [ "${1:-}" = lora ]; then
	[ "$quick" = 1 ] && export LORABENCH_ROUNDS=${LORABENCH_ROUNDS:-1} LORABENCH_SESSIONS=${LORABENCH_SESSIONS:-32}
	python3 scripts/lorabench.py "$tmp/lora-body.md"
	{ printf '%s\n\n' "$lora_heading"; cat "$tmp/lora-body.md"; } >"$tmp/lora.md"
	splice "$tmp/lora.md" "$lora_heading"
	echo "wrote the LoRA section of $out"
	exit 0
fi
gossip_heading="## Gossip budget"
realtier_heading="## Real processes: the tier against one replica"
if [ "${1:-}" = gossip ]; then
	gossip_budget "$tmp/gossip.md"
	splice "$tmp/gossip.md" "$gossip_heading"
	echo "wrote the gossip budget section of $out"
	exit 0
fi
if [ "${1:-}" = realtier ]; then
	scripts/realtier.sh "$tmp/realtier.md"
	splice "$tmp/realtier.md" "$realtier_heading"
	echo "wrote the real-process section of $out"
	exit 0
fi
trace=${TRACE:-../shared/data/traces/mooncake_conversation_trace.jsonl}

section() { printf '\n## %s\n\n' "$1" >>"$out"; }
cmdline() { printf '```\n%s\n```\n\n' "$*" >>"$out"; }

# The sections this script does not write (the chaos suite's, fleetsim's
# claims over seeds, the runs behind a default) are kept from the old file
# and put back at the end.
[ -f "$out" ] && cp "$out" "$tmp/previous.md"
{
	echo "# Benchmarks"
	echo
	echo "Made by \`make bench\` on $(date -u +%Y-%m-%d), $(nproc) cores, $(go version | cut -d' ' -f3)."
	echo "Rerun any table with the command above it."
} >"$out"
# The headline tables ("## At a glance") are written by hand over the
# sections' figures: kept from the old file, at the top.
if [ -f "$tmp/previous.md" ]; then
	python3 - "$tmp/previous.md" >>"$out" <<'PY'
import re, sys
m = re.search(r"(?ms)^## At a glance\n.*?(?=^## )", open(sys.argv[1]).read())
if m:
    sys.stdout.write("\n" + m.group(0).rstrip("\n") + "\n")
PY
fi

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
# With "lost" as its second argument it adds the tier's hit rate against one
# replica's (the first run of the file with replicas=1 and the same policy)
# and the breakdown of the hits one all-knowing replica would have made.
table() {
	python3 - "$1" "${2:-}" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
lost = sys.argv[2] == "lost"
cols = ["policy", "replicas", "sync", "hit_rate", "ttft_p50_ms", "ttft_p99_ms", "throughput_rps", "load_cv", "prefill_tokens", "gossip_bytes_per_sec"]
extra = ["vs_1_replica", "router_hit_rate", "oracle_hit_rate", "never_arrived", "evicted", "below_threshold", "shed", "ineligible", "false_hits"]
one = {r["policy"]: r["hit_rate"] for r in runs if r["replicas"] == 1}
head = cols + (extra if lost else [])
# A row that repeats an earlier row of the same policy in every figure (one
# replica under every sync; shared sync, which keeps one replica's) is left out.
rows, seen = [], set()
for r in runs:
    vals = [r.get(c, "") for c in cols]
    if lost:
        base = one.get(r["policy"])
        vals += [r["hit_rate"] / base if base else ""] + [r.get(c, "") for c in extra[1:3]]
        vals += [r["lost"][c] for c in extra[3:8]] + [r.get("false_hits", "")]
    cells = [("%.4g" % v) if isinstance(v, float) else str(v) for v in vals]
    key = (cells[0], tuple(cells[3:]))
    if key not in seen:
        seen.add(key)
        rows.append(cells)
if len(rows) < len(runs):
    print("Rows that repeat an earlier row of the same policy in every figure are left out (one replica "
          "gives the same figures under every sync, and shared sync keeps one replica's).\n")
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for cells in rows:
    print("| " + " | ".join(cells) + " |")
PY
}
# pdtable renders the P/D runs with the seed's four figures beside them, and
# the fleet gate over per-request cache_aware at each replica count.
pdtable() {
	python3 - "$1" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
seed = {"cache_aware_fleet_gate": (0.685, 2.14e6, 653, 11.5), "cache_aware": (0.889, 675e3, 193, 22.2)}
head = ["policy", "replicas", "prefill hit rate", "prompt tokens per rollout", "prefill queue mean / max", "rollouts/min", "router_hit_rate", "TTFT p50 / p99 ms", "gossip B/s"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for p, (h, tok, q, rpm) in seed.items():
    print("| %s | seed (1 router) | %.3f | %.3g | %d (statistic not given) | %.1f | | | |" % (p, h, tok, q, rpm))
for r in runs:
    print("| %s | %d | %.3f | %.0f | %.0f / %d | %.1f | %.3f | %.0f / %.0f | %.0f |" % (r["policy"], r["replicas"], r["hit_rate"],
        r["prompt_tokens_per_rollout"], r["prefill_queue_mean"], r["prefill_queue_max"], r["rollouts_per_min"],
        r["router_hit_rate"], r["ttft_p50_ms"], r["ttft_p99_ms"], r["gossip_bytes_per_sec"]))
print()
print("| fleet gate / cache_aware | prefill hit rate | prompt tokens per rollout | prefill queue mean | rollouts/min |")
print("|---|---|---|---|---|")
g, c = seed["cache_aware_fleet_gate"], seed["cache_aware"]
print("| seed | %.3f | %.2f | %.2f | %.2f |" % (g[0] / c[0], g[1] / c[1], g[2] / c[2], g[3] / c[3]))
by = {(r["policy"], r["replicas"]): r for r in runs}
for n in sorted({r["replicas"] for r in runs}):
    g, c = by.get(("cache_aware_fleet_gate", n)), by.get(("cache_aware", n))
    if g and c:
        print("| fleetsim, %d replica%s | %.3f | %.2f | %.2f | %.2f |" % (n, "" if n == 1 else "s", g["hit_rate"] / c["hit_rate"],
            g["prompt_tokens_per_rollout"] / c["prompt_tokens_per_rollout"], g["prefill_queue_mean"] / c["prefill_queue_mean"],
            g["rollouts_per_min"] / c["rollouts_per_min"]))
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
	section "Fleet simulation: the tier against one replica, with the cause of every lost hit"
	echo "Gossip at 1, 8, 32 and 64 replicas, 16 workers; see the section on the tier's losses below the tables for what the columns mean." >>"$out"
	echo >>"$out"
	reps=1,8,32,64
	[ "$quick" = 1 ] && reps=1,8
	for w in agentic rl trace; do
		case $w in
		agentic) run="bin/fleetsim --agentic --sessions $sessions --turns 20 --workers 16 --replicas $reps --sync gossip --policies cache_aware --parallel 2" ;;
		rl) run="bin/fleetsim --agentic --sessions $((sessions * 4)) --groups $((sessions / 2)) --observation-spread 1 --system-prompt-tokens 4096 --task-tokens 64 --observation-tokens 1024 --answer-tokens 128 --think-time 1s --turns 10 --workers 16 --replicas $reps --sync gossip --policies cache_aware --parallel 2" ;;
		trace) run="bin/fleetsim --trace $trace $limit --workers 16 --replicas $reps --sync gossip --policies cache_aware --parallel 2" ;;
		esac
		printf '### %s\n\n' "$w" >>"$out"
		cmdline "$run"
		$run --json "$tmp/tier-$w.json" >/dev/null
		table "$tmp/tier-$w.json" lost >>"$out"
	done
	section "Fleet simulation: the seed's P/D scenario (4 prefill / 6 decode, 1024 rollouts in parallel, one prefill worker 4x slower)"
	echo "hit_rate is the prefill workers'; prompt tokens per rollout are the prompt tokens the prefill workers computed (cache misses) over the rollouts; the prefill queue is the prefill workers' waiting queues (vllm:num_requests_waiting) summed, sampled every virtual second, its mean and max over the run. The seed's rows are its own measurements (one router, SWE-bench Pro). Virtual time: the figures do not depend on the machine's load." >>"$out"
	echo >>"$out"
	run="bin/fleetsim --agentic --pd 4:6 --sessions 1024 --groups 128 --observation-spread 1 --system-prompt-tokens 4096 --task-tokens 64 --observation-tokens 1024 --answer-tokens 128 --think-time 8s --turns 20 --kv-capacity-tokens 8388608 --slowdown 1:4 --policies cache_aware_fleet_gate,cache_aware --replicas 1,4 --sync gossip --parallel 2"
	[ "$quick" = 1 ] && run=${run/--sessions 1024 --groups 128/--sessions 128 --groups 16}
	cmdline "$run"
	echo "Load average before: $(cut -d' ' -f1-3 /proc/loadavg)." >>"$out"
	echo >>"$out"
	$run --json "$tmp/pd.json" >/dev/null
	pdtable "$tmp/pd.json" >>"$out"
	cat >>"$out" <<'PROSE'

What opens the gate, as the seed says, and how fleetsim has it:

- **Prefill load counts queued requests.** A replica counts a prefill worker's load as the requests
  it sent there whose prefill has not answered, as the proxy does: those waiting in the engine's
  queue count as much as the running ones. The engine admits a request only when a step has token
  budget left, as vLLM's scheduler does, so a prefill worker behind on long prompts runs a few and
  queues the rest. With 1024 rollouts the prefill workers' counts reach the balance thresholds (64
  requests and 1.5x the least loaded), and one slow prefill worker is enough to exceed them.
- **Decode faster than prefill.** The engine's cost model makes it so: a prefill worker computes
  every turn's new 1152 tokens (the whole prompt on a miss) in 8192-token steps; a decode worker
  generates 128 tokens for up to 256 sequences at a time and receives the prompt's KV instead of
  computing it. The decode workers hold few requests while the prefill queues build, so most
  requests in flight are in front of prefill.

The per-request check keeps a rollout on its worker unless that worker is itself overloaded; the
fleet gate drops affinity for every request while any prefill worker is, and each request it moves
is a miss that costs the whole prompt, which lengthens the queues that keep the gate open.

Where fleetsim still differs from the seed, and why:

- **The tool time (think time) is calibrated, not known.** The seed does not give its tools'
  latency. At 8 s the per-request run's mean prefill queue (187) is the seed's 193. The collapse
  needs the prefill workers' counts near the thresholds. With tools that answer in 1 s nearly every
  rollout waits on prefill (a mean queue above 500): the counts are so large that a 1.5x spread is
  rare and the gate lets about 96% of requests go to their owner, so its hit rate stays close to
  per-request's (the sweep's first row, the table this section gave before). With 16 s tools the
  queues are short and the gate seldom opens. The sweep below is at one replica, over the tool time.
- **Absolute sizes.** The seed's rollouts are SWE-bench Pro's on real GPUs, about fifteen times the
  prompt compute of these 20 turns of 1k-token observations (675k tokens computed per rollout
  against 44k); fleetsim's rollouts per minute and tokens per rollout are on its own scale. The
  ratios of the second table are what compare.
- **The collapse is milder**: the fleet gate keeps 0.86 of per-request's hit rate (the seed: 0.77)
  and computes 2.2x the prompt tokens per rollout (the seed: 3.2x). The seed's queue grew to 653
  against fleetsim's 476, so its gate stayed open longer (router_hit_rate, the share of requests
  the gate let go to their owner, is 0.75 here). Rollouts per minute is over the makespan, which
  the slowest rollouts set (the observation spread gives some groups up to 16x longer
  observations): it falls to about half, as in the seed, but says less than the queue about a
  typical rollout.
- **4 replicas** gossiping lose a little on both policies (each replica's view of its peers' loads
  is up to one interval old), and the gate's ratios to per-request stay close to one replica's.

A scaled-down copy (96 rollouts of 6 turns, the balance threshold scaled to the few requests a
prefill worker holds) is pinned by TestPerRequestAffinityBeatsTheFleetGateOnASplitFleet in
sim/fleet: per-request cache_aware ahead of the fleet gate on prefill hit rate.

PROSE
	printf '```\n%s   # X in 1s 4s 8s 12s 16s\n```\n\n' "${run/--replicas 1,4/--replicas 1}" | sed 's/--think-time 8s/--think-time X/' >>"$out"
	printf '| think time | fleet gate hit rate | cache_aware hit rate | prompt tokens per rollout, gate / cache_aware | prefill queue mean, gate / cache_aware | rollouts/min, gate / cache_aware |\n|---|---|---|---|---|---|\n' >>"$out"
	sweep=${run/--replicas 1,4/--replicas 1}
	for tt in 1s 4s 8s 12s 16s; do
		${sweep/--think-time 8s/--think-time $tt} --json "$tmp/pd-$tt.json" >/dev/null
		python3 - "$tmp/pd-$tt.json" "$tt" >>"$out" <<'PY'
import json, sys
r = {x["policy"]: x for x in json.load(open(sys.argv[1]))["runs"]}
g, c = r["cache_aware_fleet_gate"], r["cache_aware"]
print("| %s | %.3f | %.3f | %.0f / %.0f | %.0f / %.0f | %.1f / %.1f |" % (sys.argv[2], g["hit_rate"], c["hit_rate"],
    g["prompt_tokens_per_rollout"], c["prompt_tokens_per_rollout"], g["prefill_queue_mean"], c["prefill_queue_mean"],
    g["rollouts_per_min"], c["rollouts_per_min"]))
PY
	done
fi

# 4. The gossip budget -------------------------------------------------------
gossip_budget "$tmp/gossip.md"
cat "$tmp/gossip.md" >>"$out"

# 5. Real processes: the tier against one replica -------------------------------
if [ -x bin/router ] && [ -x bin/workersim ] && [ -x bin/loadgen ]; then
	scripts/realtier.sh "$tmp/realtier.md"
	printf '\n' >>"$out"
	cat "$tmp/realtier.md" >>"$out"
fi

# 6. Admission on real processes ----------------------------------------------
if [ -x bin/router ] && [ -x bin/workersim ]; then
	admission_bench "$tmp/admission.md"
	printf '\n' >>"$out"
	cat "$tmp/admission.md" >>"$out"
fi

# 3. The proxy path against nginx and HAProxy ---------------------------------
scripts/proxybench/run.sh "$tmp/proxy.md"
cat "$tmp/proxy.md" >>"$out"

# The old file's sections this run did not write.
if [ -f "$tmp/previous.md" ]; then
	python3 - "$out" "$tmp/previous.md" <<'PY'
import re, sys
out, old = sys.argv[1], open(sys.argv[2]).read()
new = open(out).read()
written = set(re.findall(r"^## (.*)$", new, re.M))
kept = [s for s in re.split(r"(?m)^(?=## )", old) if s.startswith("## ") and s.splitlines()[0][3:] not in written]
if kept:
    with open(out, "a") as f:
        f.write("\n" + "".join(kept))
PY
fi
echo "wrote $out"
