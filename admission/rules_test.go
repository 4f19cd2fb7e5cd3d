package admission

import (
	"testing"
	"time"
)

// The rules one at a time (rules.go): each test puts a Scheduler in the
// state its rule is about, through the API, and asks that rule alone about
// a request of tenant "t" of the default class costing 100 tokens: it
// holds, and one step away from that state it does not.

// ask is what rl says of a request of tenant name (its entry made if need
// be, as Arrive makes it) costing 100, arrived at arrived, at now.
func ask(s *Scheduler, rl func(*Scheduler, turn) Hold, name string, arrived, now time.Time) Hold {
	s.mu.Lock()
	defer s.mu.Unlock()
	tn := s.tenantOf(Request{Class: s.classes.def, Tenant: name})
	defer s.dropIfIdle(tn)
	return rl(s, turn{class: tn.key.class, now: now, t: tn, cost: 100, arrived: arrived, share: s.waitingMin(tn.key.class)})
}

func TestTheRoomRuleSaysWhatTookTheLastSlot(t *testing.T) {
	sat := New(SchedulerConfig{})
	sat.SetLimit(1, t0)
	limit := New(SchedulerConfig{MaxInFlight: 1})
	reserved := New(SchedulerConfig{Classes: DefaultClasses, Reserved: map[string]int{"system": 1}, MaxInFlight: 2})
	for name, tc := range map[string]struct {
		s    *Scheduler
		want Hold
	}{"the engines' limit": {sat, HeldBySaturation}, "--max-concurrent-requests": {limit, HeldByLimit},
		"a higher class's reserved slot": {reserved, HeldByClass}} {
		if h := ask(tc.s, roomRule, "t", t0, t0); h != HeldByNothing {
			t.Fatalf("%s: %v with a slot left", name, h)
		}
		tc.s.Arrive(Request{Class: tc.s.classes.def, Tenant: "other", Cost: 1}, t0)
		if h := ask(tc.s, roomRule, "t", t0, t0); h != tc.want {
			t.Errorf("%s taken: %v, want %v", name, h, tc.want)
		}
	}
}

func TestTheRateRuleHoldsUntilTheBucketRefills(t *testing.T) {
	s := New(SchedulerConfig{RatePerSec: 1, Burst: 1})
	s.Arrive(Request{Tenant: "other", Cost: 1}, t0)
	if h := ask(s, rateRule, "t", t0, t0); h != HeldByRate {
		t.Fatalf("the bucket spent: %v, want %v", h, HeldByRate)
	}
	if h := ask(s, rateRule, "t", t0, t0.Add(time.Second)); h != HeldByNothing {
		t.Fatalf("a second later: %v, want nothing", h)
	}
}

func TestTheTenantCeilingRuleCountsThePeersWithTheTierView(t *testing.T) {
	for _, tier := range []bool{false, true} {
		s := New(SchedulerConfig{TenantMaxInFlight: 2, TierFair: tier})
		s.Arrive(Request{Tenant: "t", Cost: 1}, t0)
		if h := ask(s, tenantCeilingRule, "t", t0, t0); h != HeldByNothing {
			t.Fatalf("tier %v, one in flight of 2: %v", tier, h)
		}
		s.SetPeer("peer", []PeerEntry{{Tenant: TenantID("t"), InFlight: 1}}, t0)
		want := map[bool]Hold{false: HeldByNothing, true: HeldByTenantCeiling}[tier]
		if h := ask(s, tenantCeilingRule, "t", t0, t0); h != want {
			t.Errorf("tier %v, one here and one at a peer: %v, want %v", tier, h, want)
		}
	}
}

func TestTheFairShareRuleHoldsATenantAheadOfAnotherWaitingInTheTier(t *testing.T) {
	for _, tier := range []bool{false, true} {
		s := New(SchedulerConfig{TierFair: tier})
		s.Arrive(Request{Tenant: "t", Cost: 100}, t0)
		s.SetPeer("peer", []PeerEntry{{Tenant: TenantID("u"), Queued: 1}}, t0)
		want := map[bool]Hold{false: HeldByNothing, true: HeldByFairShare}[tier]
		if h := ask(s, fairShareRule, "t", t0, t0); h != want {
			t.Errorf("tier %v, 100 tokens ahead of a tenant waiting at a peer: %v, want %v", tier, h, want)
		}
		s.SetPeer("peer", []PeerEntry{{Tenant: TenantID("u"), Queued: 1, Tokens: 1}}, t0)
		if h := ask(s, fairShareRule, "t", t0, t0); h != HeldByNothing {
			t.Errorf("tier %v, 99 tokens ahead, less than the request's 100: %v", tier, h)
		}
	}
}

func TestTheOldestInTheTierRuleLeavesASlotToAnOlderRequestAtAPeer(t *testing.T) {
	s := New(SchedulerConfig{TierFair: true})
	s.SetLimit(1, t0)
	s.SetPeer("peer", []PeerEntry{{Tenant: TenantID("t"), Queued: 1, Waited: time.Second}}, t0.Add(time.Second))
	if h := ask(s, oldestInTierRule, "t", t0.Add(time.Second), t0.Add(time.Second)); h != HeldBySaturation {
		t.Fatalf("the peer's request of t waited since t0, ours arrives a second later: %v, want %v", h, HeldBySaturation)
	}
	if h := ask(s, oldestInTierRule, "t", t0, t0.Add(time.Second)); h != HeldByNothing {
		t.Fatalf("ours arrived as early: %v, want nothing", h)
	}
	s.SetLimit(-1, t0.Add(time.Second))
	if h := ask(s, oldestInTierRule, "t", t0.Add(time.Second), t0.Add(time.Second)); h != HeldByNothing {
		t.Fatalf("the engines bound no room: %v, want nothing", h)
	}
}

// TestTheFirstRuleThatHoldsSaysWhatHeld: a request that the rate bucket
// and its tenant's ceiling both hold is held by the rate (a class rule
// comes first), and one its ceiling and its fair share both hold by its
// ceiling.
func TestTheFirstRuleThatHoldsSaysWhatHeld(t *testing.T) {
	s := New(SchedulerConfig{RatePerSec: 1, Burst: 1, TenantMaxInFlight: 1, TierFair: true})
	s.Arrive(Request{Tenant: "t", Cost: 100}, t0)
	s.SetPeer("peer", []PeerEntry{{Tenant: TenantID("u"), Queued: 1}}, t0)
	s.mu.Lock()
	tn := s.tenantOf(Request{Tenant: "t"})
	rate, ceiling := s.hold(tn, 100, t0, t0), s.hold(tn, 100, t0, t0.Add(time.Second))
	s.mu.Unlock()
	if rate != HeldByRate || ceiling != HeldByTenantCeiling {
		t.Errorf("held by %v with the bucket spent, by %v a second later; want %v, %v", rate, ceiling, HeldByRate, HeldByTenantCeiling)
	}
}
