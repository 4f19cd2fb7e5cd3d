package membership

import (
	"time"

	"github.com/kvrouter/kvrouter/loadsync"
)

// departure is how and when a replica stopped being a live member.
type departure struct {
	state string // "left" (it said goodbye) or "dead" (it stopped answering)
	addr  string // its last gossip address
	at    time.Time
}

// MaxDeparted bounds the departed replicas remembered: enough for every
// replica of a large tier to restart at once, small enough that replicas
// coming and going under new names (autoscaled pods) cannot grow it.
const MaxDeparted = 128

// note records a membership event.
func (m *Membership) note(ev loadsync.MemberEvent, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name := ev.Member.Name
	if ev.Member.Addr != "" {
		m.seen[name] = ev.Member.Addr
	}
	if ev.Kind != loadsync.MemberLeft {
		delete(m.departed, name)
		return
	}
	state := "dead"
	if ev.Member.Tags[TagLeaving] == "1" {
		state = "left"
	}
	m.departed[name] = departure{state: state, addr: ev.Member.Addr, at: now}
	m.boundDeparted()
}

// boundDeparted drops the oldest departures beyond MaxDeparted, and the
// addresses of replicas neither live nor remembered as departed. Callers
// hold mu.
func (m *Membership) boundDeparted() {
	for len(m.departed) > MaxDeparted {
		oldest, at := "", time.Time{}
		for name, d := range m.departed {
			if oldest == "" || d.at.Before(at) {
				oldest, at = name, d.at
			}
		}
		delete(m.departed, oldest)
		delete(m.seen, oldest)
	}
}

// DepartedAs is how a replica that is not a live member went away ("left",
// "dead", or "unknown" when this replica never saw it) and its last gossip
// address ("" when unknown).
func (m *Membership) DepartedAs(name string) (state, addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, ok := m.departed[name]; ok {
		return d.state, d.addr
	}
	return "unknown", m.seen[name]
}

// ExpectsPeers reports whether this replica has peers to hear from: one
// it saw in the gossip, other than self, that did not leave.
func (m *Membership) ExpectsPeers() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.seen {
		if d, gone := m.departed[name]; name != m.cfg.Self && (!gone || d.state != "left") {
			return true
		}
	}
	return false
}

// DepartedCount is how many departed replicas are remembered.
func (m *Membership) DepartedCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.departed)
}

// seenCount is how many gossip addresses are remembered.
func (m *Membership) seenCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

// lastAddrs returns the last known gossip address of each named replica
// this replica has seen.
func (m *Membership) lastAddrs(names []string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, n := range names {
		if a, ok := m.seen[n]; ok {
			out = append(out, a)
		}
	}
	return out
}
