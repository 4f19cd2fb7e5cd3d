package membership

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/loadsync"
)

func member(name string, tags ...string) loadsync.Member {
	m := loadsync.Member{Name: name, State: "alive", Tags: map[string]string{TagRaft: "10.0.0." + name[1:] + ":7947"}}
	for _, kv := range tags {
		k, v, _ := strings.Cut(kv, "=")
		m.Tags[k] = v
	}
	return m
}

func TestBootstrapVoters(t *testing.T) {
	cases := []struct {
		name    string
		self    string
		members []loadsync.Member
		want    []string // voter ids; nil: do not bootstrap
	}{
		{"too few replicas yet", "r1", []loadsync.Member{member("r1", "expect=3"), member("r2", "expect=3")}, nil},
		{"the lowest name bootstraps all", "r1",
			[]loadsync.Member{member("r3", "expect=3"), member("r1", "expect=3"), member("r2", "expect=3")},
			[]string{"r1", "r2", "r3"}},
		{"the others wait for it", "r2",
			[]loadsync.Member{member("r1", "expect=3"), member("r2", "expect=3"), member("r3", "expect=3")}, nil},
		{"only the first expect of more", "r1",
			[]loadsync.Member{member("r1", "expect=3"), member("r2", "expect=3"), member("r3", "expect=3"), member("r4", "expect=3")},
			[]string{"r1", "r2", "r3"}},
		{"replicas expecting another size do not count", "r1",
			[]loadsync.Member{member("r1", "expect=3"), member("r2", "expect=3"), member("r3", "expect=1")}, nil},
		{"an existing cluster is joined, not bootstrapped", "r0",
			[]loadsync.Member{member("r0", "expect=3"), member("r1", "expect=3", "joined=1"), member("r2", "expect=3"), member("r3", "expect=3")}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ServerIDs(BootstrapVoters(tc.self, 3, tc.members))
			if len(got) == 0 {
				got = nil
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("voters = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBootstrapVotersCarryTheirRaftAddresses(t *testing.T) {
	voters := BootstrapVoters("r1", 2, []loadsync.Member{member("r1", "expect=2"), member("r2", "expect=2")})
	if len(voters) != 2 || voters[1].Addr != "10.0.0.2:7947" || voters[1].Suffrage != "voter" {
		t.Fatalf("voters = %+v", voters)
	}
}

// planSettled plans as the leader of a settled cluster does: every server
// live at its address has been so for longer than any stabilisation time.
func planSettled(self string, expect int, servers []Server, live map[string]string,
	missing map[string]time.Time, now time.Time, reap time.Duration) []Change {
	stable := TrackStable(nil, servers, live, now.Add(-time.Hour))
	return Plan(Config{Self: self, Expect: expect, ReapTimeout: reap},
		Observed{Servers: servers, Live: live, Missing: missing, Stable: stable, Now: now})
}

// describe renders a plan for comparison.
func describe(plan []Change) []string {
	ops := map[Op]string{OpAddNonvoter: "nonvoter", OpAddVoter: "voter", OpRemove: "remove"}
	var out []string
	for _, c := range plan {
		out = append(out, fmt.Sprintf("%s %s %s", ops[c.Op], c.ID, c.Addr))
	}
	return out
}

func TestPlanMembership(t *testing.T) {
	now := time.Unix(1000, 0)
	reap := 30 * time.Second
	voter := func(id, addr string) Server { return Server{ID: id, Addr: addr, Suffrage: Voter} }
	nonvoter := func(id, addr string) Server { return Server{ID: id, Addr: addr, Suffrage: Nonvoter} }
	three := []Server{voter("a", "A"), voter("b", "B"), voter("c", "C")}
	cases := []struct {
		name    string
		servers []Server
		live    map[string]string
		missing map[string]time.Time
		want    []string
	}{
		{"in step: nothing to do", three, map[string]string{"a": "A", "b": "B", "c": "C"}, nil, nil},
		{"a replica that joins later is a non-voter", three,
			map[string]string{"a": "A", "b": "B", "c": "C", "d": "D"}, nil, []string{"nonvoter d D"}},
		{"a voter back at a new address is moved, still a voter", three,
			map[string]string{"a": "A", "b": "B2", "c": "C"}, nil, []string{"voter b B2"}},
		{"a non-voter back at a new address is moved, still a non-voter",
			append(slices.Clone(three), nonvoter("d", "D")), map[string]string{"a": "A", "b": "B", "c": "C", "d": "D2"}, nil,
			[]string{"nonvoter d D2"}},
		{"a replica away for less than the reap timeout stays", three,
			map[string]string{"a": "A", "b": "B"}, map[string]time.Time{"c": now.Add(-reap + time.Second)}, nil},
		{"a dead voter is reaped and a live non-voter takes its seat",
			append(slices.Clone(three), nonvoter("d", "D")), map[string]string{"a": "A", "b": "B", "d": "D"},
			map[string]time.Time{"c": now.Add(-reap)}, []string{"remove c ", "voter d D"}},
		{"self is never reaped", three, map[string]string{"b": "B", "c": "C"}, map[string]time.Time{"a": now.Add(-time.Hour)}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := describe(planSettled("a", 3, tc.servers, tc.live, tc.missing, now, reap))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("plan = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTrackMissingKeepsTheFirstSighting(t *testing.T) {
	servers := []Server{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	t1, t2 := time.Unix(1, 0), time.Unix(2, 0)
	missing := TrackMissing(nil, "a", servers, map[string]string{"a": "A"}, nil, t1)
	missing = TrackMissing(missing, "a", servers, map[string]string{"a": "A", "c": "C"}, nil, t2)
	if len(missing) != 1 || !missing["b"].Equal(t1) {
		t.Fatalf("missing = %v, want only b, since %v", missing, t1)
	}
}

func TestTheDepartedAreBounded(t *testing.T) {
	m := New(Config{}, nil, nil, true)
	start := time.Unix(1000, 0)
	for i := range 3 * MaxDeparted {
		ev := loadsync.MemberEvent{Kind: loadsync.MemberLeft, Member: loadsync.Member{Name: fmt.Sprintf("pod-%d", i), Addr: fmt.Sprintf("10.0.0.%d:7946", i%250)}}
		m.note(ev, start.Add(time.Duration(i)*time.Second))
	}
	if n := m.DepartedCount(); n != MaxDeparted {
		t.Fatalf("%d departed remembered, want %d", n, MaxDeparted)
	}
	if st, _ := m.DepartedAs(fmt.Sprintf("pod-%d", 3*MaxDeparted-1)); st != "dead" {
		t.Fatalf("the latest departure is %q, want dead", st)
	}
	if st, addr := m.DepartedAs("pod-0"); st != "unknown" || addr != "" {
		t.Fatalf("the oldest departure is still known: %q at %q", st, addr)
	}
	if m.seenCount() > MaxDeparted {
		t.Fatalf("%d addresses remembered, want at most %d", m.seenCount(), MaxDeparted)
	}
}

// TestTheLeaderDoesNotReapAReplicaThatStillGossips: a server memberlist
// declared dead whose load reports still arrive is not counted missing,
// and its clock starts again once they stop.
func TestTheLeaderDoesNotReapAReplicaThatStillGossips(t *testing.T) {
	servers := []Server{{ID: "a", Addr: "A", Suffrage: Voter}, {ID: "b", Addr: "B", Suffrage: Voter},
		{ID: "c", Addr: "C", Suffrage: Voter}}
	live := map[string]string{"a": "A"}
	t1, t2 := time.Unix(1, 0), time.Unix(100, 0)
	missing := TrackMissing(nil, "a", servers, live, map[string]bool{"b": true}, t1)
	if _, ok := missing["b"]; ok || !missing["c"].Equal(t1) {
		t.Fatalf("missing = %v, want only c", missing)
	}
	missing = TrackMissing(missing, "a", servers, live, nil, t2)
	plan := planSettled("a", 3, servers, live, missing, t2.Add(time.Second), 30*time.Second)
	if len(plan) != 1 || plan[0].Op != OpRemove || plan[0].ID != "c" {
		t.Fatalf("plan = %+v, want only c removed (b's clock started at %v)", plan, t2)
	}
}

func TestANonvoterIsPromotedOnlyOnceStable(t *testing.T) {
	now := time.Unix(1000, 0)
	servers := []Server{{ID: "a", Addr: "A", Suffrage: Voter}, {ID: "b", Addr: "B", Suffrage: Voter},
		{ID: "d", Addr: "D", Suffrage: Nonvoter}}
	live := map[string]string{"a": "A", "b": "B", "d": "D"}
	cfg := Config{Self: "a", Expect: 3, ReapTimeout: time.Minute, Stabilization: 10 * time.Second}
	stable := TrackStable(nil, servers, live, now)
	for _, tc := range []struct {
		after time.Duration
		want  []string
	}{
		{0, nil},
		{9 * time.Second, nil},
		{10 * time.Second, []string{"voter d D"}},
	} {
		got := describe(Plan(cfg, Observed{Servers: servers, Live: live, Stable: stable, Now: now.Add(tc.after)}))
		if !slices.Equal(got, tc.want) {
			t.Errorf("%v after d became stable: plan = %q, want %q", tc.after, got, tc.want)
		}
	}
}

func TestTrackStableStartsAfreshForAServerThatMovedOrWentAway(t *testing.T) {
	servers := []Server{{ID: "a", Addr: "A"}, {ID: "b", Addr: "B"}, {ID: "c", Addr: "C"}}
	t1, t2 := time.Unix(1, 0), time.Unix(2, 0)
	stable := TrackStable(nil, servers, map[string]string{"a": "A", "b": "B", "c": "C"}, t1)
	stable = TrackStable(stable, servers, map[string]string{"a": "A", "b": "B2"}, t2)
	if len(stable) != 1 || !stable["a"].Equal(t1) {
		t.Fatalf("stable = %v, want only a, since %v", stable, t1)
	}
	stable = TrackStable(stable, servers, map[string]string{"a": "A", "c": "C"}, t2)
	if !stable["c"].Equal(t2) {
		t.Fatalf("c, back at its address, is stable since %v, want %v", stable["c"], t2)
	}
}
