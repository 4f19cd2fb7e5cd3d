package affinity

import "testing"

// routeAs routes prompt under identity id and releases it at once.
func (f *fleet) routeAs(t *testing.T, id CacheID, prompt string) Decision {
	t.Helper()
	d, g, err := f.router.Route(f.router.PrepareFor(id, Text{[]byte(prompt)}, 0), f.pool)
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
	return d
}

func TestSaltedAndUnsaltedPromptsNeverMatchEachOther(t *testing.T) {
	prompt := text("a tenant's long system prompt", 400)
	for _, tc := range []struct {
		name        string
		first, then CacheID
		hit         bool
	}{
		{"unsalted after salted", CacheID{"m", "tenant-a"}, CacheID{"m", ""}, false},
		{"salted after unsalted", CacheID{"m", ""}, CacheID{"m", "tenant-a"}, false},
		{"another salt", CacheID{"m", "tenant-a"}, CacheID{"m", "tenant-b"}, false},
		{"the same salt", CacheID{"m", "tenant-a"}, CacheID{"m", "tenant-a"}, true},
		{"the base model after its adapter", CacheID{"sql-lora", ""}, CacheID{"base", ""}, false},
		{"an adapter after its base model", CacheID{"base", ""}, CacheID{"sql-lora", ""}, false},
		{"the same adapter", CacheID{"sql-lora", ""}, CacheID{"sql-lora", ""}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, 4, Settings{})
			owner := f.routeAs(t, tc.first, prompt).Worker
			f.setLoad(owner, 1) // a miss goes elsewhere
			d := f.routeAs(t, tc.then, prompt)
			if d.Hit != tc.hit || (d.Worker == owner) != tc.hit {
				t.Fatalf("hit %v on %d (owner %d), want hit %v", d.Hit, d.Worker, owner, tc.hit)
			}
		})
	}
}

func TestAShortPromptsKeyDependsOnItsSalt(t *testing.T) {
	// A prompt shorter than a block is placed by its tail key alone.
	f := newFleet(t, 4, Settings{})
	a := f.router.PrepareFor(CacheID{"m", "x"}, Text{[]byte("hi")}, 0)
	b := f.router.PrepareFor(CacheID{"m", ""}, Text{[]byte("hi")}, 0)
	if a.Tail == b.Tail || a.Hashes[0] == b.Hashes[0] {
		t.Fatalf("a salted short prompt keys like the unsalted one")
	}
}

func TestAnUnsaltedSeedIsTheModelSeed(t *testing.T) {
	// Replicas of an earlier build hash unsalted requests the same way.
	if (CacheID{Model: "m"}).Seed() != ModelSeed("m") {
		t.Fatal("an unsalted identity's seed is not the model's")
	}
}
