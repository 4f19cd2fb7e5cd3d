"""Turns perf stat's syscall counts and wrk's counts into per-request figures.
  budget.py line NAME CASE PERF.txt WRK.json "MALLOCS GCS" "MALLOCS GCS"
      prints one JSON line
  budget.py table BUDGET.jsonl LOAD-START LOAD-END DURATION
      prints the markdown section"""
import json
import sys

# the columns of the table, and which syscalls each counts
GROUPS = [
    ("read", ("read", "readv")),
    ("recvfrom", ("recvfrom",)),
    ("write", ("write", "writev", "sendto")),
    ("epoll", ("epoll_wait", "epoll_pwait", "epoll_pwait2", "epoll_ctl")),
    ("futex", ("futex",)),
    ("nanosleep", ("nanosleep", "clock_nanosleep")),
]


def parse_perf(path):
    """perf stat -x, lines: count,unit,event,... ; sys_enter_X counts the
    calls of X, sys_exit_X (filtered on EAGAIN) its EAGAIN exits, and
    raw_syscalls:sys_enter every syscall ("total")."""
    calls, errors = {}, {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) < 3 or not f[0].isdigit():
            continue
        n, event = int(f[0]), f[2]
        if event == "raw_syscalls:sys_enter":
            calls["total"] = n
        elif event.startswith("syscalls:sys_enter_"):
            calls[event[len("syscalls:sys_enter_"):]] = n
        elif event.startswith("syscalls:sys_exit_"):
            errors[event[len("syscalls:sys_exit_"):]] = n
    return calls, errors


def line(name, case, strace, wrk, before, after):
    calls, errors = parse_perf(strace)
    w = json.loads(open(wrk).read().strip().splitlines()[-1])
    d = {"name": name, "case": case, "requests": w["requests"], "errors": w["errors"] + w["non2xx"],
         "calls": calls, "syscall_errors": errors}
    if before and after:
        b, a = [float(x) for x in before.split()], [float(x) for x in after.split()]
        d["mallocs"], d["gcs"] = a[0] - b[0], a[1] - b[1]
    print(json.dumps(d))


def per(n, reqs):
    return "%.2f" % (n / reqs) if reqs else ""


def table(path, load_start, load_end, duration):
    rows = [json.loads(l) for l in open(path)]
    ls, le = open(load_start).read().split()[:3], open(load_end).read().split()[:3]
    print("### Syscalls and allocations per request\n")
    print("wrk (1 thread, 64 connections, %s per case) through each proxy while `perf stat` counts every "
          "syscall of its processes on the kernel's tracepoints (nginx's worker; every thread of the Go "
          "proxies), so nothing slows them. A read's error is EAGAIN: it found "
          "nothing and went back to the poller; recvfrom is the router's MSG_PEEK look at an idle pooled "
          "connection (and at a client whose request is older than 20 ms), whose EAGAIN is the answer 'nothing "
          "there', and nginx's recv. Allocations and GC cycles are the router's own Go "
          "runtime counters over the same requests. Load average at the start and end: %s and %s.\n"
          % (duration, " ".join(ls), " ".join(le)))
    head = ["case", "proxy", "requests", "syscalls/req"] + [g for g, _ in GROUPS] + ["read EAGAIN", "recvfrom EAGAIN", "other", "allocs/req", "GC cycles / 1k req"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        n, calls, errs = r["requests"], r["calls"], r["syscall_errors"]
        total = calls.pop("total", 0)
        cols, counted = [], set()
        for _, names in GROUPS:
            cols.append(per(sum(calls.get(c, 0) for c in names), n))
            counted.update(names)
        eagain = sum(errs.get(c, 0) for c in GROUPS[0][1])
        peek_empty = sum(errs.get(c, 0) for c in GROUPS[1][1])
        other_s = per(total - sum(calls.values()), n)
        allocs = per(r["mallocs"], n) if "mallocs" in r else ""
        gcs = "%.2f" % (1000 * r["gcs"] / n) if "gcs" in r and n else ""
        print("| " + " | ".join([r["case"], r["name"], str(n), per(total, n)] + cols + [per(eagain, n), per(peek_empty, n), other_s, allocs, gcs]) + " |")


if __name__ == "__main__":
    if sys.argv[1] == "line":
        line(*sys.argv[2:8])
    else:
        table(*sys.argv[2:6])
