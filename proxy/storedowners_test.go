package proxy

import "testing"

// The owners a replica remembers take at most their budget in bytes,
// however many responses strangers make: the least recently used go first.
func TestStoredResponseOwnersStayWithinTheirBudget(t *testing.T) {
	const budget = 100 * (ownerEntryBytes + 37)
	o := newResponseOwners(budget)
	first := newResponseID()
	o.put(first, responseOwner{worker: 1})
	for range 10_000 {
		o.put(newResponseID(), responseOwner{worker: 2})
		o.get(first) // kept in use
	}
	if o.held() > budget {
		t.Fatalf("the owners take %d bytes, over their budget of %d", o.held(), budget)
	}
	if _, ok := o.get(first); !ok {
		t.Fatal("an owner in use was forgotten before the least recently used")
	}
	if len(o.byID) != 100 {
		t.Fatalf("%d owners kept, want the budget's 100", len(o.byID))
	}
}

// vllm_router_stored_response_owner_bytes says what the owners take, and
// stays within its budget (a small one here) however many responses are made.
func TestTheOwnersBudgetIsAMetric(t *testing.T) {
	w := startFake(t, "w1")
	w.SetEvery(newResponseStore("w1").serve)
	const budget = 3 * (ownerEntryBytes + 37)
	r := startTierRouter(t, Config{APIKeys: []string{"k1"}, StoredResponseOwnerBytes: budget}, w)
	for range 10 {
		createResponse(t, r.url, "k1")
	}
	if got := metric(t, r, "vllm_router_stored_response_owner_bytes"); got != budget {
		t.Fatalf("vllm_router_stored_response_owner_bytes %v, want the budget %d, full", got, budget)
	}
}
