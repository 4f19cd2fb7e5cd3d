package admission

import (
	"errors"
	"fmt"
)

// Reason says why a request was refused, or what held it while it waited.
type Reason uint8

const (
	// QueueFull: every place in the queue was taken by requests of its
	// class or above.
	QueueFull Reason = iota + 1
	// Shed: it was queued, and a request of a higher class took its place.
	Shed
	// TimedOut: it waited QueueTimeout.
	TimedOut
	// ClientGone: its client went away while it waited.
	ClientGone
)

func (r Reason) String() string {
	switch r {
	case QueueFull:
		return "queue_full"
	case Shed:
		return "shed"
	case TimedOut:
		return "queue_timeout"
	case ClientGone:
		return "client_gone"
	}
	return "unknown"
}

// Hold is what keeps a request waiting.
type Hold uint8

const (
	// HeldByNothing: it can go at once.
	HeldByNothing Hold = iota
	// HeldBySaturation: the engines report that they run all they can.
	HeldBySaturation
	// HeldByLimit: --max-concurrent-requests is reached.
	HeldByLimit
	// HeldByRate: the rate bucket is empty.
	HeldByRate
	// HeldByClass: requests of a higher class wait, or their reserved
	// slots are unused.
	HeldByClass
	// HeldByTenantCeiling: its tenant has TenantMaxInFlight in flight.
	HeldByTenantCeiling
	// HeldByFairShare: other tenants of its class, here or at a peer, have
	// less in flight and are waiting.
	HeldByFairShare
)

func (h Hold) String() string {
	return [...]string{"none", "saturation", "max_concurrent_requests", "rate_limit", "class", "tenant_ceiling",
		"fair_share"}[h]
}

// ErrRefused is wrapped by every *Refusal.
var ErrRefused = errors.New("not admitted")

// Refusal is why a request was not admitted: the reason, its class and
// tenant, and what held it.
type Refusal struct {
	Reason Reason
	Hold   Hold
	Class  string
	Tenant string
}

func (r *Refusal) Error() string {
	what := map[Reason]string{QueueFull: "the admission queue is full", Shed: "shed from the admission queue for a higher class",
		TimedOut: "timed out in the admission queue", ClientGone: "the client went away while queued"}[r.Reason]
	return fmt.Sprintf("%s (class %s, tenant %s, held by %s)", what, r.Class, r.Tenant, holdText(r.Hold))
}

func (r *Refusal) Unwrap() error { return ErrRefused }

func holdText(h Hold) string {
	switch h {
	case HeldBySaturation:
		return "saturation: the engines report they run all they can"
	case HeldByLimit:
		return "--max-concurrent-requests"
	case HeldByRate:
		return "--rate-limit-tokens-per-second"
	case HeldByClass:
		return "class: higher classes are waiting or hold reserved slots"
	case HeldByTenantCeiling:
		return "the tenant ceiling (--tenant-max-inflight)"
	case HeldByFairShare:
		return "fair share: other tenants of the class have less in flight across the tier"
	}
	return "nothing"
}
