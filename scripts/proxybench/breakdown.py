"""Where the router's CPU per request goes, by function, from a CPU profile
taken under wrk (cost.sh's COST_PROFILE): each row is a function with what
it calls (pprof's cum), as a share of the profile and in µs per request
(the share of the CPU per request cost.sh measured in the same run), and
how much of it is in syscalls.
  breakdown.py BINARY PROFILE CPU_US_PER_REQ [BINARY PROFILE CPU_US ...]
prints a markdown table with a column pair per profile."""
import re
import subprocess
import sys

# (row, pprof function name, or a pair: the first less the second, or a
# list: the first of them a build has, for a function renamed); nested rows
# are indented with "- "
ROWS = [
    ("fasthttp's connection loop, everything of a request", "github.com/valyala/fasthttp.(*Server).serveConn"),
    ("- the router's handler", "github.com/kvrouter/kvrouter/proxy.(*Proxy).Handler"),
    ("- - the door: key, admission", "github.com/kvrouter/kvrouter/proxy.(*Proxy).admitted"),
    ("- - the door: reading the body", "github.com/kvrouter/kvrouter/proxy.(*Proxy).readBody"),
    ("- - reading the JSON, rendering the routing text", "github.com/kvrouter/kvrouter/proxy.parseInference"),
    ("- - hashing the routing text's blocks", ["github.com/kvrouter/kvrouter/affinity.(*Router).PrepareText",
                                              "github.com/kvrouter/kvrouter/affinity.(*Router).Prepare"]),
    ("- - choosing the worker (core Decide)", "github.com/kvrouter/kvrouter/core.(*Replica).Decide"),
    ("- - - recording the blocks in the index", "github.com/kvrouter/kvrouter/affinity.(*Index).Insert"),
    ("- - writing the request to the worker", "github.com/kvrouter/kvrouter/proxy.(*upConn).writeRequest"),
    ("- - reading the answer's head", "github.com/kvrouter/kvrouter/proxy.readHead"),
    ("- - reading the answer's body", "github.com/kvrouter/kvrouter/proxy.(*attempt).readWhole"),
    ("- - the answer's usage (cached tokens)", "github.com/kvrouter/kvrouter/proxy.usageOf"),
    ("- - finish: metrics, request log, trace, tally", "github.com/kvrouter/kvrouter/proxy.(*exchange).finish"),
    ("- fasthttp outside the handler: reading the client's request, writing the answer",
     ("github.com/valyala/fasthttp.(*Server).serveConn", "github.com/kvrouter/kvrouter/proxy.(*Proxy).Handler")),
    ("the Go scheduler (poller, idle, wake-ups)", "runtime.schedule"),
    ("the garbage collector's workers", "runtime.gcBgMarkWorker"),
    ("heap allocation (everywhere)", "runtime.mallocgc"),
    ("syscalls (everywhere)", "internal/runtime/syscall/linux.Syscall6"),
]


def cum(binary, profile, ignore=None):
    args = ["go", "tool", "pprof", "-top", "-cum", "-nodecount=100000"]
    if ignore:
        args.append("-ignore=" + ignore)
    out = subprocess.run(args + [binary, profile], capture_output=True, text=True, check=True).stdout
    total = float(re.search(r"Total samples = ([\d.]+)(m?s)", out).group(1))
    if re.search(r"Total samples = [\d.]+ms", out):
        total /= 1000
    shares = {}
    for line in out.splitlines():
        f = line.split(None, 5)
        if len(f) == 6 and f[4].endswith("%"):
            shares[f[5].strip()] = float(f[4].rstrip("%")) / 100
    return shares, total


def share(shares, fn):
    if isinstance(fn, tuple):
        return max(shares.get(fn[0], 0.0) - shares.get(fn[1], 0.0), 0.0)
    if isinstance(fn, list):
        return next((shares[f] for f in fn if f in shares), 0.0)
    return shares.get(fn, 0.0)


def main(args):
    runs = [args[i:i + 3] for i in range(0, len(args), 3)]
    cols = []
    for binary, profile, cpu in runs:
        every, total = cum(binary, profile)
        user, user_total = cum(binary, profile, "Syscall6")
        cols.append((every, user, user_total / total if total else 0, float(cpu)))
    head = ["where"]
    for _, profile, cpu in runs:
        name = profile.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        head += ["%s: share, µs/req (of %s)" % (name, cpu), "%s: in syscalls µs/req" % name]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row, fn in ROWS:
        cells = [row]
        for every, user, user_frac, cpu in cols:
            a, u = share(every, fn), share(user, fn)
            # user[] is a share of the samples left once those in syscalls are dropped
            u = u * user_frac if fn != ROWS[-1][1] else 0.0
            cells += ["%.1f%%, %.1f" % (100 * a, a * cpu), "%.1f" % (max(a - u, 0) * cpu)]
        print("| " + " | ".join(cells) + " |")


main(sys.argv[1:])
