# Helpers of the proxy benchmark, sourced by run.sh.

# need_tools installs wrk, nginx and HAProxy from Debian's packages when one
# is missing.
need_tools() {
	local missing=()
	command -v wrk >/dev/null 2>&1 || missing+=(wrk)
	command -v nginx >/dev/null 2>&1 || missing+=(nginx-light)
	command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
	[ ${#missing[@]} -eq 0 ] && return
	echo "installing ${missing[*]} from Debian" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# free_port prints a free loopback port.
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_http URL [-f] waits until URL answers (with -f: with a 2xx), for at
# most WAIT_HTTP_SECONDS (10 s).
wait_http() {
	for _ in $(seq $((${WAIT_HTTP_SECONDS:-10} * 10))); do
		curl -s ${2:-} -o /dev/null "$1" && return 0
		sleep 0.1
	done
	echo "nothing answers at $1" >&2
	return 1
}

# start_upstream starts the instant nginx upstream (conf.sh) on a free port,
# port[upstream] (declare -A port first), and waits until it answers.
start_upstream() {
	port[upstream]=$(free_port)
	nginx_upstream "$tmp" "${port[upstream]}" >"$tmp/nginx-upstream.conf"
	start upstream nginx -c "$tmp/nginx-upstream.conf" -g 'daemon off;'
	wait_http "http://127.0.0.1:${port[upstream]}/"
}

# start NAME CMD...: runs CMD in the background, logging to $tmp/NAME.log,
# and remembers its pid in pids[NAME].
declare -A pids
start() {
	local name=$1
	shift
	"$@" >"$tmp/$name.log" 2>&1 &
	pids[$name]=$!
}

# stop NAME ends what start NAME started.
stop() {
	local pid=${pids[$1]:-}
	[ -n "$pid" ] || return 0
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	unset "pids[$1]"
}

stop_all() {
	for name in "${!pids[@]}"; do stop "$name"; done
}

# cpu_ticks PID prints the CPU time, in clock ticks, of PID and its children
# (nginx's workers under its master).
cpu_ticks() {
	python3 - "$1" <<'PY'
import os, sys
root = sys.argv[1]
total = 0
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    if pid == root or f[1] == root:  # f[1] is the parent pid
        total += int(f[11]) + int(f[12])  # utime + stime
print(total)
PY
}

# bench_begin starts a script of the benchmark once lib.sh is sourced (with
# $here its directory): $tmp, a directory removed at exit unless
# KEEP_BENCH_TMP is set, every process started by then stopped, and
# conf.sh's configurations.
bench_begin() {
	tmp=$(mktemp -d)
	source "$here/conf.sh"
	trap 'stop_all; [ -n "${KEEP_BENCH_TMP:-}" ] || rm -rf "$tmp"' EXIT
}
