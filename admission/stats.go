package admission

import (
	"slices"
	"strings"
)

// Stats is a point-in-time view of the Scheduler, for metrics and /ui.
type Stats struct {
	// Limit is the engines' bound on this replica's requests in flight,
	// -1 when unknown; MaxInFlight the configured one (0: none).
	Limit       int          `json:"limit"`
	MaxInFlight int          `json:"max_in_flight"`
	InFlight    int          `json:"in_flight"`
	Queued      int          `json:"queued"`
	QueueSize   int          `json:"queue_size"`
	Classes     []ClassStats `json:"classes"` // highest first
	// Tenants are the (class, tenant) pairs with requests queued or in
	// flight here, at most MaxStatsTenants, those with the most queued
	// first.
	Tenants []TenantStats `json:"tenants"`
	// Peers is how many peers' queue reports are held.
	Peers int `json:"peers"`
	// TenantBytes is what the tenants here take of MaxTenantBytes, and
	// Overflowed how many requests went to OverflowTenant for want of it.
	TenantBytes int64  `json:"tenant_bytes"`
	Overflowed  uint64 `json:"overflowed"`
}

// ClassStats is one class's share of the Stats.
type ClassStats struct {
	Name     string `json:"name"`
	Reserved int    `json:"reserved"`
	InFlight int    `json:"in_flight"`
	Queued   int    `json:"queued"`
	// PeerQueued is what the peers report waiting in the class.
	PeerQueued int `json:"peer_queued"`
}

// TenantStats is one (class, tenant) of the Stats.
type TenantStats struct {
	Class      string `json:"class"`
	Tenant     string `json:"tenant"`
	InFlight   int    `json:"in_flight"`
	Queued     int    `json:"queued"`
	Tokens     int64  `json:"tokens"`      // the cost of its requests in flight here
	PeerTokens int64  `json:"peer_tokens"` // and at the peers
}

// MaxStatsTenants bounds Stats.Tenants.
const MaxStatsTenants = 50

// Stats returns the current view.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Limit: s.limit, MaxInFlight: s.cfg.MaxInFlight, InFlight: s.inflight, Queued: s.queued,
		QueueSize: s.cfg.QueueSize, Peers: len(s.peers.origins), TenantBytes: s.tenantBytes, Overflowed: s.overflowed}
	for i := range s.bands {
		cs := ClassStats{Name: s.classes.Name(Class(i)), Reserved: s.reserved[i], InFlight: s.inflightBy[i], Queued: s.queuedBy[i]}
		for k, q := range s.peers.queued {
			if k.class == Class(i) {
				cs.PeerQueued += int(q)
			}
		}
		st.Classes = append(st.Classes, cs)
	}
	for _, t := range s.tenants {
		st.Tenants = append(st.Tenants, TenantStats{Class: s.classes.Name(t.key.class), Tenant: t.key.name,
			InFlight: t.inflight, Queued: len(t.queue), Tokens: t.tokens, PeerTokens: s.peers.remoteTokens(t.key.class, t.id)})
	}
	slices.SortFunc(st.Tenants, func(a, b TenantStats) int {
		if a.Queued != b.Queued {
			return b.Queued - a.Queued
		}
		if a.InFlight != b.InFlight {
			return b.InFlight - a.InFlight
		}
		return strings.Compare(a.Class+a.Tenant, b.Class+b.Tenant)
	})
	st.Tenants = st.Tenants[:min(len(st.Tenants), MaxStatsTenants)]
	return st
}
