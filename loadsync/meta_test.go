package loadsync

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckJoinAcceptsTheSameConfig(t *testing.T) {
	a := newReplica(t, "a", nil)
	b := newReplica(t, "b", func(c *Config) { c.BootEpoch = 99 })
	if err := a.st.CheckJoin(b.st.Meta()); err != nil {
		t.Fatalf("CheckJoin of a peer with the same config: %v", err)
	}
}

func TestCheckJoinNamesEveryDifferingField(t *testing.T) {
	a := newReplica(t, "a", func(c *Config) {
		c.ClusterConfig = map[string]string{"block_size": "256", "hash_seed": "x", "same": "1"}
	})
	b := newReplica(t, "b", func(c *Config) {
		c.ClusterConfig = map[string]string{"block_size": "128", "miss_placement": "rendezvous", "same": "1"}
	})
	err := a.st.CheckJoin(b.st.Meta())
	if !errors.Is(err, ErrConfigMismatch) {
		t.Fatalf("CheckJoin = %v, want ErrConfigMismatch", err)
	}
	var mismatch *ConfigMismatchError
	if !errors.As(err, &mismatch) || mismatch.Peer != "b" || len(mismatch.Diffs) != 3 {
		t.Fatalf("CheckJoin = %#v, want 3 diffs from peer b", err)
	}
	want := `config mismatch with peer "b": block_size 256 vs 128, hash_seed x vs <unset>, miss_placement <unset> vs rendezvous`
	if err.Error() != want {
		t.Fatalf("error text\n got %q\nwant %q", err.Error(), want)
	}
}

func TestCheckJoinRejectsGarbageAndOtherVersions(t *testing.T) {
	a := newReplica(t, "a", nil)
	meta := append([]byte(nil), a.st.Meta()...)
	meta[1] = protocolVersion + 1
	if err := a.st.CheckJoin(meta); !errors.Is(err, ErrVersion) {
		t.Fatalf("CheckJoin of another version = %v, want ErrVersion", err)
	}
	for _, garbage := range [][]byte{nil, {msgMeta}, {msgLoad, protocolVersion}, a.st.Meta()[:len(a.st.Meta())-1]} {
		if err := a.st.CheckJoin(garbage); err == nil {
			t.Fatalf("CheckJoin(%x) accepted garbage", garbage)
		}
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	big := map[string]string{}
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		big[k] = strings.Repeat("v", 120)
	}
	cases := map[string]Config{
		"no origin":      {},
		"long origin":    {Origin: strings.Repeat("o", 129)},
		"ttl <= period":  {Origin: "a", LoadInterval: 100e6, LoadTTL: 100e6},
		"tiny packets":   {Origin: "a", MaxPacketBytes: 100},
		"meta over 512":  {Origin: "a", ClusterConfig: big},
		"empty field":    {Origin: "a", ClusterConfig: map[string]string{"": "x"}},
		"long field val": {Origin: "a", ClusterConfig: map[string]string{"k": strings.Repeat("v", 129)}},
	}
	for name, cfg := range cases {
		if _, err := New(cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestTagsAreAnnouncedButNotCompared(t *testing.T) {
	a := newReplica(t, "a", func(c *Config) { c.Tags = map[string]string{"raft": "10.0.0.1:7947"} })
	b := newReplica(t, "b", func(c *Config) { c.Tags = map[string]string{"raft": "10.0.0.2:7947", "api": "x"} })
	if err := a.st.CheckJoin(b.st.Meta()); err != nil {
		t.Fatalf("CheckJoin compared tags: %v", err)
	}
	m, err := decodeMeta(b.st.Meta())
	if err != nil || m.tags["raft"] != "10.0.0.2:7947" || m.tags["api"] != "x" {
		t.Fatalf("decoded tags %v, %v", m.tags, err)
	}
}

func TestSetTagsRefusesWhatDoesNotFitAndKeepsTheOldOnes(t *testing.T) {
	a := newReplica(t, "a", func(c *Config) { c.Tags = map[string]string{"k": "old"} })
	big := map[string]string{}
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		big[k] = strings.Repeat("v", 120)
	}
	if err := a.st.SetTags(big); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("SetTags of %d bytes = %v, want ErrInvalidConfig", 5*120, err)
	}
	if m, _ := decodeMeta(a.st.Meta()); m.tags["k"] != "old" {
		t.Fatalf("a refused SetTags changed the tags to %v", m.tags)
	}
	if err := a.st.SetTags(map[string]string{"k": "new"}); err != nil {
		t.Fatal(err)
	}
	if m, _ := decodeMeta(a.st.Meta()); m.tags["k"] != "new" {
		t.Fatalf("tags after SetTags = %v", m.tags)
	}
}
