#!/usr/bin/env python3
"""Where a run's time to first token went, from the routers' request logs that kvbench keeps
(KVBENCH_KEEP=DIR): for each run (the logs DIR/<run>-router-*.log), the quantiles of the TTFT the
routers measured, of the routing time (arrival to the first worker chosen), of the prefill the
engines were asked for (their uncached prompt tokens, prompt_tokens less cached_tokens, times the
engine's per-token prefill time, --prefill-us-per-token: llm-d-inference-sim's
--prefill-time-per-token in kvbench, 200 us), and of the rest (TTFT less both: forwarding, the
engine's own overheads, the relay). Two runs whose prefill quantiles agree placed the same work
in their tails; a TTFT that differs then differs in routing or in the rest.

    scripts/ttfttail.py [--prefill-us-per-token 200] DIR
"""
import argparse
import glob
import os
import re

FIELD = re.compile(r'(\w+)=("[^"]*"|\S+)')


def requests(paths):
    """The request lines of paths that carry a TTFT and the engine's prompt tokens."""
    out = []
    for path in paths:
        with open(path) as f:
            for line in f:
                if "msg=request " not in line:
                    continue
                d = dict(FIELD.findall(line))
                if "ttft_ms" in d and "prompt_tokens" in d:
                    out.append(d)
    return out


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefill-us-per-token", type=float, default=200)
    ap.add_argument("dir")
    a = ap.parse_args()
    runs = sorted({os.path.basename(p).rsplit("-router-", 1)[0] for p in glob.glob(os.path.join(a.dir, "*-router-*.log"))})
    print("| run | requests | TTFT p50 / p99 ms | routing p50 / p99 ms | prefill asked p50 / p99 ms | the rest p50 / p90 / p99 ms |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        rows = requests(glob.glob(os.path.join(a.dir, run + "-router-*.log")))
        if not rows:
            continue
        ttft = [float(r["ttft_ms"]) for r in rows]
        routing = [float(r.get("routing_ms", 0)) for r in rows]
        prefill = [a.prefill_us_per_token / 1000 * (int(r["prompt_tokens"]) - int(r.get("cached_tokens", 0))) for r in rows]
        rest = [t - r - p for t, r, p in zip(ttft, routing, prefill)]
        q = lambda xs, *qs: " / ".join(f"{quantile(xs, x):.0f}" for x in qs)
        print(f"| {run} | {len(rows)} | {q(ttft, .5, .99)} | {q(routing, .5, .99)} | {q(prefill, .5, .99)} | {q(rest, .5, .9, .99)} |")


if __name__ == "__main__":
    main()
