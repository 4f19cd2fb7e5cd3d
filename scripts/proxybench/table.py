"""Renders the proxy benchmark's results (the JSON files run.sh wrote) as
the markdown section of BENCHMARKS.md.
Usage: table.py DIR ROUNDS DURATION STREAM_DURATION"""
import json
import os
import statistics
import sys

tmp, rounds, duration, stream_duration = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
ROUNDS = range(1, rounds + 1)
NAMES = {
    "direct": "direct to the upstream",
    "nginx": "nginx (1 worker, keepalive 256, proxy_buffering off)",
    "haproxy": "HAProxy (nbthread 1, http-reuse always)",
    "fasthttp": "fasthttp HostClient, no routing (GOMAXPROCS=2)",
    "router": "router, cache_aware (GOMAXPROCS=2)",
    "router_1cpu": "router, cache_aware (GOMAXPROCS=1)",
    "router_rr": "router, round_robin (GOMAXPROCS=2)",
}


def load(kind, key, target, r):
    with open(os.path.join(tmp, "%s-%s-%s-%d.json" % (kind, key, target, r))) as f:
        return json.load(f)


def mean(xs):
    return statistics.fmean(xs)


def rps(d):
    return d["requests"] / (d["duration_us"] / 1e6)


def ratios(per_round):
    return ", ".join("%.2f" % x for x in per_round)


def requests_table(size):
    targets = ["direct", "nginx", "haproxy", "fasthttp", "router", "router_1cpu", "router_rr"]
    runs = {t: [load("req", size, t, r) for r in ROUNDS] for t in targets}
    print("### %s KiB chat body\n" % size)
    print("| path | req/s | p50 ms | p99 ms | p99.9 ms | proxy CPU µs/req | req/s vs nginx (per round) "
          "| p99 vs nginx (per round) | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for t in targets:
        rs = runs[t]
        tput = [rps(d) for d in rs]
        vs = [rps(d) / rps(n) for d, n in zip(rs, runs["nginx"])]
        p99 = [d["p99_us"] / n["p99_us"] for d, n in zip(rs, runs["nginx"])]
        cpu = mean([d["cpu_s"] * 1e6 / d["requests"] for d in rs])
        errors = sum(d["errors"] + d["non2xx"] for d in rs)
        print("| %s | %s | %.2f | %.2f | %.2f | %.1f | %.2f (%s) | %.2f (%s) | %d |" % (
            NAMES[t], "{:,.0f}".format(mean(tput)), mean([d["p50_us"] for d in rs]) / 1e3,
            mean([d["p99_us"] for d in rs]) / 1e3, mean([d["p999_us"] for d in rs]) / 1e3,
            cpu, mean(vs), ratios(vs), mean(p99), ratios(p99), errors))
    print()
    r, n, h = (mean([rps(d) for d in runs[t]]) for t in ("router", "nginx", "haproxy"))
    r1 = mean([rps(d) for d in runs["router_1cpu"]])
    f = mean([rps(d) for d in runs["fasthttp"]])
    print("Router / nginx throughput: %.2f with both cores, %.2f on one core (GOMAXPROCS=1 against one "
          "nginx worker); router / HAProxy: %.2f and %.2f; router / fasthttp's HostClient: %.2f.\n"
          % (r / n, r1 / n, r / h, r1 / h, r / f))


def streams_table(streams):
    targets = ["direct", "nginx", "haproxy", "router", "router_1cpu"]
    runs = {t: [load("sse", streams, t, r) for r in ROUNDS] for t in targets}
    print("### %s concurrent stream%s of 1,000 events\n" % (streams, "" if streams == "1" else "s"))
    print("| path | events/s | events/s vs nginx (per round) | gap p50 µs | gap p99 µs | latency p50 µs "
          "| latency p99 µs | latency added p50 / p99 µs | proxy CPU µs/event | failed |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    direct = runs["direct"]
    for t in targets:
        rs = runs[t]
        vs = [d["events_per_sec"] / n["events_per_sec"] for d, n in zip(rs, runs["nginx"])]
        add50 = mean([d["latency_p50_us"] - x["latency_p50_us"] for d, x in zip(rs, direct)])
        add99 = mean([d["latency_p99_us"] - x["latency_p99_us"] for d, x in zip(rs, direct)])
        cpu = mean([d["cpu_s"] * 1e6 / max(d["events"], 1) for d in rs])
        print("| %s | %s | %.2f (%s) | %.1f | %.1f | %.0f | %.0f | %s | %.2f | %d |" % (
            NAMES[t], "{:,.0f}".format(mean([d["events_per_sec"] for d in rs])), mean(vs), ratios(vs),
            mean([d["gap_p50_us"] for d in rs]), mean([d["gap_p99_us"] for d in rs]),
            mean([d["latency_p50_us"] for d in rs]), mean([d["latency_p99_us"] for d in rs]),
            "" if t == "direct" else "%+.0f / %+.0f" % (add50, add99), cpu, sum(d["failed"] for d in rs)))
    print()


print("## Proxy path against nginx and HAProxy\n")
print("wrk (1 thread, 64 connections, %s per run) POSTs a chat body to `/v1/chat/completions`, directly "
      "to the upstream and through each proxy. The upstream is nginx (1 worker) returning a fixed "
      "completion JSON at once, so the proxy is the bottleneck, not the worker. wrk, the upstream and "
      "the proxy under test share the machine's 2 cores, so a proxy that spends less CPU per request "
      "leaves more to the others: proxy CPU µs/req is the CPU time of the proxy's processes divided by "
      "the requests served (in the direct row, the upstream's). Figures are means over %d rounds; each round runs every target once, side "
      "by side, and the ratios to nginx are given per round to show how steady they were.\n"
      % (duration, rounds))
loadavg = [open(os.path.join(tmp, f)).read().split()[0] for f in ("load-start", "load-end")
        if os.path.exists(os.path.join(tmp, f))]
if loadavg:
    print("Load average of the machine when the run started and ended: %s (2 cores; other work ran "
          "beside it, which is why the per-round ratios differ).\n" % " and ".join(loadavg))
print("An earlier version of this file put the router at 1.14x nginx's throughput. That run went through a "
      "workersim that was itself the bottleneck (about 2,000 req/s even without a proxy), so it measured the "
      "worker, not the proxy: behind an instant upstream, the router of that time reached about half of "
      "nginx's throughput (0.54x and 0.61x with a 4 KiB body in two runs of this script at commit cb80641).\n")
for size in ("4", "64"):
    requests_table(size)
print("### Streaming relay\n")
print("An upstream (scripts/proxybench/ssebench) answers every request with 1,000 SSE events written "
      "one by one, each its own chunk and write, as fast as it can, each stamped with the time it was "
      "written; the client reads the streams back to back for %s per run. gap is the time between two "
      "events of a stream at the client, latency the time from the upstream's write to the client's "
      "read (it includes what queues while the producer outruns the relay); added is over the direct "
      "run of the same round.\n" % stream_duration)
for streams in ("1", "32"):
    streams_table(streams)
print("```\nmake bench-proxy   # scripts/proxybench/run.sh; BENCH_ROUNDS, BENCH_DURATION, BENCH_STREAM_DURATION change the runs\n```")
