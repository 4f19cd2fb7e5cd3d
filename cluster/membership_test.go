package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/loadsync"
)

func member(name string, tags ...string) loadsync.Member {
	m := loadsync.Member{Name: name, State: "alive", Tags: map[string]string{tagRaft: "10.0.0." + name[1:] + ":7947"}}
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
			got := serverIDs(bootstrapVoters(tc.self, 3, tc.members))
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
	voters := bootstrapVoters("r1", 2, []loadsync.Member{member("r1", "expect=2"), member("r2", "expect=2")})
	if len(voters) != 2 || voters[1].Addr != "10.0.0.2:7947" || voters[1].Suffrage != "voter" {
		t.Fatalf("voters = %+v", voters)
	}
}

// describe renders a plan for comparison.
func describe(plan []membershipChange) []string {
	ops := map[changeOp]string{opAddNonvoter: "nonvoter", opAddVoter: "voter", opRemove: "remove"}
	var out []string
	for _, c := range plan {
		out = append(out, fmt.Sprintf("%s %s %s", ops[c.op], c.id, c.addr))
	}
	return out
}

func TestPlanMembership(t *testing.T) {
	now := time.Unix(1000, 0)
	reap := 30 * time.Second
	voter := func(id, addr string) RaftServer { return RaftServer{ID: id, Addr: addr, Suffrage: "voter"} }
	nonvoter := func(id, addr string) RaftServer { return RaftServer{ID: id, Addr: addr, Suffrage: "nonvoter"} }
	three := []RaftServer{voter("a", "A"), voter("b", "B"), voter("c", "C")}
	cases := []struct {
		name    string
		servers []RaftServer
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
			got := describe(planMembership("a", 3, tc.servers, tc.live, tc.missing, now, reap))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("plan = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTrackMissingKeepsTheFirstSighting(t *testing.T) {
	servers := []RaftServer{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	t1, t2 := time.Unix(1, 0), time.Unix(2, 0)
	missing := trackMissing(nil, "a", servers, map[string]string{"a": "A"}, nil, t1)
	missing = trackMissing(missing, "a", servers, map[string]string{"a": "A", "c": "C"}, nil, t2)
	if len(missing) != 1 || !missing["b"].Equal(t1) {
		t.Fatalf("missing = %v, want only b, since %v", missing, t1)
	}
}

func TestClusterConfigFitsTheGossipMetadata(t *testing.T) {
	rt := DefaultRouting()
	rt.PD, rt.PrefillMissPlacement = "vllm", "rendezvous"
	rt.PrefillThresholds = Thresholds{CacheThreshold: 0.123456789, BalanceAbs: 123456.5, BalanceRel: 1.23456789}
	rt.DecodeThresholds = rt.PrefillThresholds
	tags := map[string]string{tagRaft: "[2001:db8:ffff:ffff:ffff:ffff:ffff:ffff]:65535",
		tagAPI: "[2001:db8:ffff:ffff:ffff:ffff:ffff:ffff]:65535", tagExpect: "100", tagJoined: "1"}
	_, err := loadsync.New(loadsync.Config{Origin: strings.Repeat("n", 63), ClusterConfig: rt.clusterConfig(), Tags: tags})
	if err != nil {
		t.Fatalf("the largest plausible metadata does not fit: %v", err)
	}
}

func TestAdvertisedAPIAddrReplacesAWildcardHost(t *testing.T) {
	cases := map[string]string{"127.0.0.1:8000": "127.0.0.1:8000", "0.0.0.0:8000": "10.1.2.3:8000", "[::]:8000": "10.1.2.3:8000"}
	for bound, want := range cases {
		if got := advertisedAPIAddr(fakeAddr(bound), "10.1.2.3:7947"); got != want {
			t.Errorf("advertisedAPIAddr(%s) = %s, want %s", bound, got, want)
		}
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "tcp" }
func (a fakeAddr) String() string  { return string(a) }
