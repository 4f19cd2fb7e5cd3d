package health

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/workerurl"
)

// Config sets the thresholds and timings of a Monitor. Start from DefaultConfig
// and override what the flags say; New refuses a Config that fails Validate.
type Config struct {
	// Interval is how often Run probes every worker's health endpoint
	// (--health-check-interval-secs). Default 60s, the flag's established
	// default: request outcomes and progress detection react in seconds, so
	// active checks only have to catch workers that get no traffic.
	Interval time.Duration
	// Timeout bounds one probe, connect included (--health-check-timeout-secs),
	// and one read of a worker's /metrics. Default 5s, or Interval if that is
	// shorter (the command line defaults it so); must not exceed Interval, so
	// rounds never overlap.
	Timeout time.Duration
	// FailureThreshold is the number of consecutive failed probes that mark a
	// healthy worker unhealthy (--health-failure-threshold). Default 3.
	FailureThreshold int
	// SuccessThreshold is the number of consecutive good probes that mark an
	// unhealthy worker healthy again (--health-success-threshold). Default 2.
	SuccessThreshold int
	// Endpoint is the path probed on each worker; any 2xx answer is good
	// (--health-check-endpoint). Default "/health".
	Endpoint string

	// CBFailureThreshold is the number of consecutive failed requests that open a
	// worker's circuit (--cb-failure-threshold). Default 10.
	CBFailureThreshold int
	// CBSuccessThreshold is the number of successful trial requests that close a
	// half-open circuit (--cb-success-threshold). Default 3.
	CBSuccessThreshold int
	// CBTimeout is how long a circuit stays open before it lets trial requests
	// through (--cb-timeout-duration-secs). Default 60s.
	CBTimeout time.Duration
	// DisableCircuitBreaker keeps request failures from opening circuits
	// (--disable-circuit-breaker); health checks and wedge or degrade
	// verdicts still take a worker out.
	DisableCircuitBreaker bool
	// CBHalfOpenTrials is how many trial requests a half-open circuit admits at
	// once; a finished trial frees its slot. Default 3. No flag.
	CBHalfOpenTrials int

	// WedgeTimeout is how long a worker with requests in flight may deliver no
	// progress (no response headers, no body read, no stream chunk, no
	// completion, no rise of its engine's token counters in /metrics) before
	// it is judged wedged, and how long one attempt may hear nothing before
	// its Stuck channel closes (--wedge-timeout). It also bounds a recovery
	// probe. Default 60s.
	WedgeTimeout time.Duration
	// DegradeRatio: a worker whose median per-request token rate is below
	// DegradeRatio times the median of its peers' rates is degraded; so is a
	// recovery probe slower than the same probe to a peer by more than
	// 1/DegradeRatio (--degrade-ratio). Default 0.2; must lie in (0, 1).
	DegradeRatio float64
	// DegradeWindow is how far back token-rate samples count (--degrade-window).
	// Streams are sampled while they run, so a worker that slows down is
	// judged on its slow samples once they are the majority of the window's:
	// about half of it after the onset. Default 10s.
	DegradeWindow time.Duration
	// DegradeMinSamples is the number of samples within DegradeWindow a worker
	// needs before its rate is judged or used as a peer's yardstick. Default 5.
	// No flag.
	DegradeMinSamples int

	// EvalInterval is how often Run calls Tick to evaluate wedge and degrade
	// verdicts and the breaker's open-to-half-open step; it is also the
	// heartbeat whose lateness reveals a stall of this replica. Default 1s.
	// No flag.
	EvalInterval time.Duration

	// EngineScrapeInterval is how often the /metrics of a worker with
	// attempts in flight is read for the saturation signal (requests
	// waiting, KV cache usage), besides the reads the progress detector
	// makes of silent workers (--engine-scrape-interval-secs). At most once per EvalInterval. 0 (the
	// default here; the command line sets DefaultEngineScrapeInterval): only those reads.
	EngineScrapeInterval time.Duration

	// APIKey is the bearer token that recovery probes (POST /v1/completions)
	// carry, as inference requests do (--api-key). Empty sends none.
	APIKey string

	// Dialer makes every connection to a worker (probes, scrapes, recovery
	// probes), under the worker-host policy (--allowed-worker-hosts), the
	// same one the proxy dials with. Nil is one with the default policy:
	// link-local and metadata addresses are refused even so.
	Dialer *workerurl.Dialer
}

// DefaultEngineScrapeInterval is the EngineScrapeInterval the command line
// runs with (--engine-scrape-interval-secs); a Config's own default is 0.
const DefaultEngineScrapeInterval = time.Second

// DefaultConfig returns the defaults documented on each Config field.
func DefaultConfig() Config {
	return Config{
		Interval:           60 * time.Second,
		Timeout:            5 * time.Second,
		FailureThreshold:   3,
		SuccessThreshold:   2,
		Endpoint:           "/health",
		CBFailureThreshold: 10,
		CBSuccessThreshold: 3,
		CBTimeout:          60 * time.Second,
		CBHalfOpenTrials:   3,
		WedgeTimeout:       60 * time.Second,
		DegradeRatio:       0.2,
		DegradeWindow:      10 * time.Second,
		DegradeMinSamples:  5,
		EvalInterval:       time.Second,
	}
}

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("invalid health config")

// ConfigError names the Config field that Validate refused, and the router
// flag that sets it when there is one.
type ConfigError struct {
	Field  string // Config field name, e.g. "Timeout"
	Flag   string // router flag, e.g. "--health-check-timeout-secs"; empty when none
	Reason string
}

func (e *ConfigError) Error() string {
	name := e.Field
	if e.Flag != "" {
		name += " (" + e.Flag + ")"
	}
	return fmt.Sprintf("health: %s %s", name, e.Reason)
}

// Unwrap lets errors.Is(err, ErrInvalidConfig) match.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// flagOf maps Config fields to the router flags that set them.
var flagOf = map[string]string{
	"Interval":             "--health-check-interval-secs",
	"Timeout":              "--health-check-timeout-secs",
	"FailureThreshold":     "--health-failure-threshold",
	"SuccessThreshold":     "--health-success-threshold",
	"Endpoint":             "--health-check-endpoint",
	"CBFailureThreshold":   "--cb-failure-threshold",
	"CBSuccessThreshold":   "--cb-success-threshold",
	"CBTimeout":            "--cb-timeout-duration-secs",
	"WedgeTimeout":         "--wedge-timeout",
	"DegradeRatio":         "--degrade-ratio",
	"DegradeWindow":        "--degrade-window",
	"EngineScrapeInterval": "--engine-scrape-interval-secs",
}

func invalid(field, reason string) error {
	return &ConfigError{Field: field, Flag: flagOf[field], Reason: reason}
}

// Validate reports the first field that is out of range, as a *ConfigError.
func (c Config) Validate() error {
	for _, check := range []func(Config) error{
		validateChecks, validateBreaker, validateProgress,
	} {
		if err := check(c); err != nil {
			return err
		}
	}
	return nil
}

func validateChecks(c Config) error {
	switch {
	case c.Interval <= 0:
		return invalid("Interval", "must be positive")
	case c.Timeout <= 0:
		return invalid("Timeout", "must be positive")
	case c.Timeout > c.Interval:
		return invalid("Timeout", "must not exceed the check interval")
	case c.FailureThreshold < 1:
		return invalid("FailureThreshold", "must be at least 1")
	case c.SuccessThreshold < 1:
		return invalid("SuccessThreshold", "must be at least 1")
	case !strings.HasPrefix(c.Endpoint, "/"):
		return invalid("Endpoint", "must be a path starting with /")
	}
	return nil
}

func validateBreaker(c Config) error {
	switch {
	case c.CBFailureThreshold < 1:
		return invalid("CBFailureThreshold", "must be at least 1")
	case c.CBSuccessThreshold < 1:
		return invalid("CBSuccessThreshold", "must be at least 1")
	case c.CBTimeout <= 0:
		return invalid("CBTimeout", "must be positive")
	case c.CBHalfOpenTrials < 1:
		return invalid("CBHalfOpenTrials", "must be at least 1")
	}
	return nil
}

func validateProgress(c Config) error {
	switch {
	case c.WedgeTimeout <= 0:
		return invalid("WedgeTimeout", "must be positive")
	case !(c.DegradeRatio > 0 && c.DegradeRatio < 1):
		return invalid("DegradeRatio", "must lie strictly between 0 and 1")
	case c.DegradeWindow <= 0:
		return invalid("DegradeWindow", "must be positive")
	case c.DegradeMinSamples < 1:
		return invalid("DegradeMinSamples", "must be at least 1")
	case c.EvalInterval <= 0:
		return invalid("EvalInterval", "must be positive")
	case c.EngineScrapeInterval < 0:
		return invalid("EngineScrapeInterval", "must not be negative")
	}
	return nil
}
