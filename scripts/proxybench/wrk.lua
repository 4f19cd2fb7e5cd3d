-- wrk script of the proxy benchmark: POSTs the body in $BODY_FILE and, when
-- done, prints one JSON line with the figures the table needs.
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
	local e = summary.errors
	io.write(string.format(
		'{"requests":%d,"duration_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,' ..
		'"errors":%d,"non2xx":%d}\n',
		summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
		latency:percentile(99), latency:percentile(99.9),
		e.connect + e.read + e.write + e.timeout, e.status))
end
