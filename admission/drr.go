package admission

// tenant is one tenant's requests of one class at this replica.
type tenant struct {
	key      tenantKey
	id       uint64    // TenantID(key.name)
	queue    []*Ticket // oldest first
	deficit  int64     // tokens it may still be served this round
	inflight int       // admitted, not done
	tokens   int64     // their cost
	inRing   bool
}

// band is one class's tenants with requests queued, served by deficit
// round robin: each turn a tenant's deficit grows by the quantum, and its
// requests go while their cost fits in it, so over time every tenant with
// requests waiting is served the same tokens, whatever the size of its
// requests.
type band struct {
	ring []*tenant
	next int // whose turn it is
}

func (b *band) join(t *tenant) {
	if !t.inRing {
		t.inRing = true
		t.deficit = 0
		b.ring = append(b.ring, t)
	}
}

func (b *band) leave(t *tenant) {
	for i, r := range b.ring {
		if r == t {
			b.ring = append(b.ring[:i], b.ring[i+1:]...)
			if i < b.next {
				b.next--
			}
			break
		}
	}
	if b.next >= len(b.ring) {
		b.next = 0
	}
	t.inRing, t.deficit = false, 0
}

// pick returns the next tenant in turn whose head request may go and fits
// in its deficit, after as many rounds of quantum as that takes (added at
// once rather than looped over), or nil when no tenant may go.
func (b *band) pick(quantum int64, may func(*tenant) bool) *tenant {
	n := len(b.ring)
	rounds := int64(-1)
	for i := range n {
		t := b.ring[(b.next+i)%n]
		if !may(t) {
			continue
		}
		need := t.queue[0].req.Cost - t.deficit
		if need <= 0 {
			b.next = (b.next + i) % n
			return t
		}
		if r := (need + quantum - 1) / quantum; rounds < 0 || r < rounds {
			rounds = r
		}
	}
	if rounds < 0 {
		return nil
	}
	for _, t := range b.ring {
		if may(t) {
			t.deficit += rounds * quantum
		}
	}
	// The turn moves on: the tenant whose deficit ran out goes last.
	for i := 1; i <= n; i++ {
		t := b.ring[(b.next+i)%n]
		if may(t) && t.queue[0].req.Cost <= t.deficit {
			b.next = (b.next + i) % n
			return t
		}
	}
	return nil
}

// longest is the tenant with the most requests queued, nil when none.
func (b *band) longest() *tenant {
	var out *tenant
	for _, t := range b.ring {
		if out == nil || len(t.queue) > len(out.queue) {
			out = t
		}
	}
	return out
}
