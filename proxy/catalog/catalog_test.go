package catalog

import (
	"slices"
	"testing"
)

func TestAWorkersListNamesItsModelsAndWhichAreAdapters(t *testing.T) {
	s, err := Parse([]byte(`{"object":"list","data":[{"id":"base"},{"id":"sql","parent":"base"},{"id":""},{"id":"self","parent":"self"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"base", "sql", "self"}; !slices.Equal(s.Names, want) {
		t.Fatalf("names %v, want %v", s.Names, want)
	}
	if want := []string{"sql"}; !slices.Equal(s.Adapters, want) {
		t.Fatalf("adapters %v, want %v (a model that names itself as its parent is no adapter)", s.Adapters, want)
	}
	if _, err := Parse([]byte(`{"data":`)); err == nil {
		t.Fatal("a broken list was read")
	}
}

func TestAnAdapterAddedLeavesTheListItCameFromAlone(t *testing.T) {
	s := Served{Names: append(make([]string, 0, 4), "base"), Adapters: make([]string, 0, 4)}
	with := s.WithAdapter("sql")
	if !slices.Equal(with.Names, []string{"base", "sql"}) || !slices.Equal(with.Adapters, []string{"sql"}) {
		t.Fatalf("with the adapter: %+v", with)
	}
	if s.Names[:2][1] == "sql" || s.Adapters[:1][0] == "sql" {
		t.Fatal("the adapter was written into the spare room of the list it came from, which the fleet still holds")
	}
}

func TestTheRoutersListIsSortedAndNeverNull(t *testing.T) {
	if got, want := string(ListBody(nil)), `{"object":"list","data":[]}`; got != want {
		t.Fatalf("empty: %s, want %s", got, want)
	}
	got := string(ListBody(map[string]bool{"b": true, "a": true}))
	want := `{"object":"list","data":[{"id":"a","object":"model","owned_by":"kvrouter"},{"id":"b","object":"model","owned_by":"kvrouter"}]}`
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}
