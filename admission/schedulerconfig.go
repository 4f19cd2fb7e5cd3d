package admission

import (
	"errors"
	"fmt"
	"time"
)

// SchedulerConfig is what a Scheduler is built with, from the operator's
// Config (Config.Scheduler). The zero value admits everything at once: no
// limit, no queue.
type SchedulerConfig struct {
	// Classes are the class names, highest first (--priority-classes).
	// Empty: one class, DefaultClass, and priority headers are ignored.
	Classes []string
	// Default is the class of a request that names none
	// (--priority-default-class); it must be one of Classes. Empty: DefaultClass if
	// Classes holds it, else the lowest class.
	Default string
	// Reserved holds, per class name, the in-flight slots that lower
	// classes may not take while the class leaves them unused
	// (--priority-reserved), unless Lend.
	Reserved map[string]int
	// Lend lets lower classes borrow the reserved slots a class leaves
	// unused, and lets the class take them back over the engines' limit:
	// for engines that queue by priority when told the class, as vLLM's
	// priority scheduling (--lend-reserved-slots). vLLM v1 preempts no running
	// request for a waiting one, so the class then waits at the engine for
	// the first borrower to end. MaxInFlight stays a bound. Off: a reserved
	// slot stays idle while its class is idle.
	Lend bool
	// MaxInFlight bounds the requests admitted and not done
	// (--max-concurrent-requests); 0: no bound of its own.
	MaxInFlight int
	// RatePerSec and Burst are the rate bucket admissions take from
	// (--rate-limit-tokens-per-second, burst --max-concurrent-requests);
	// RatePerSec 0: no bucket.
	RatePerSec float64
	Burst      int
	// QueueSize bounds the requests waiting, over every class (--queue-size);
	// 0: a request that cannot be admitted at once is refused.
	QueueSize int
	// QueueTimeout is how long a request may wait (--queue-timeout-secs),
	// for the caller to enforce; Stats reports it.
	QueueTimeout time.Duration
	// TenantMaxInFlight bounds one tenant's requests in flight, across the
	// tier when peers report (--tenant-max-inflight); 0: no ceiling.
	TenantMaxInFlight int
	// Quantum is the tokens a tenant's deficit grows by per round of deficit
	// round robin. Default 4096: about one typical request, so that rounds
	// stay short.
	Quantum int64
	// TierFair makes the peers' reports count (--tier-fairness); without it
	// each replica judges only its own requests.
	TierFair bool
	// MaxTenantBytes bounds the bytes the tenants with requests here take
	// in the Scheduler's tables; past it a new tenant's requests go to
	// OverflowTenant (tenantbudget.go). Default DefaultMaxTenantBytes.
	MaxTenantBytes int64
}

// ErrConfig is wrapped by every error Validate returns.
var ErrConfig = errors.New("invalid admission config")

func configError(flag, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, flag, fmt.Sprintf(format, args...))
}

// withDefaults fills the defaults documented on each field.
func (c SchedulerConfig) withDefaults() SchedulerConfig {
	if len(c.Classes) == 0 {
		c.Classes = []string{DefaultClass}
	}
	if c.Default == "" {
		c.Default = c.Classes[len(c.Classes)-1]
		for _, n := range c.Classes {
			if n == DefaultClass {
				c.Default = n
			}
		}
	}
	if c.Quantum <= 0 {
		c.Quantum = 4096
	}
	if c.MaxTenantBytes <= 0 {
		c.MaxTenantBytes = DefaultMaxTenantBytes
	}
	return c
}

// Validate reports the first setting out of range, naming its flag.
func (c SchedulerConfig) Validate() error {
	c = c.withDefaults()
	if len(c.Classes) > MaxClasses {
		return configError("--priority-classes", "%d classes, at most %d", len(c.Classes), MaxClasses)
	}
	seen := map[string]bool{}
	for _, n := range c.Classes {
		if !validName(n) {
			return configError("--priority-classes", "%q is not a class name (letters, digits, - and _)", n)
		}
		if seen[n] {
			return configError("--priority-classes", "%q is named twice", n)
		}
		seen[n] = true
	}
	if !seen[c.Default] {
		return configError("--priority-default-class", "%q is not one of --priority-classes", c.Default)
	}
	for n, slots := range c.Reserved {
		if !seen[n] {
			return configError("--priority-reserved", "%q is not one of --priority-classes", n)
		}
		if slots < 0 {
			return configError("--priority-reserved", "%s=%d is negative", n, slots)
		}
	}
	switch {
	case c.MaxInFlight < 0:
		return configError("--max-concurrent-requests", "must not be negative")
	case c.QueueSize < 0:
		return configError("--queue-size", "must not be negative")
	case c.TenantMaxInFlight < 0:
		return configError("--tenant-max-inflight", "must not be negative")
	case c.RatePerSec < 0:
		return configError("--rate-limit-tokens-per-second", "must not be negative")
	}
	return nil
}

func validName(n string) bool {
	if n == "" || len(n) > 32 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
