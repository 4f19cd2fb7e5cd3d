package admission

import (
	"errors"
	"strings"
	"testing"
)

func TestClassesParse(t *testing.T) {
	cl := NewClasses(Config{Classes: DefaultClasses})
	for _, c := range []struct {
		in   string
		want Class
		bad  bool
	}{
		{"", 2, false}, {"bulk", 3, false}, {"INTERACTIVE", 1, false}, {"0", 0, false}, {"3", 3, false},
		{"-1", 0, true}, {"4", 0, true}, {"urgent", 0, true}, {"  system ", 0, false},
	} {
		got, err := cl.Parse(c.in)
		if c.bad != (err != nil) || !c.bad && got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d, bad %v", c.in, got, err, c.want, c.bad)
		}
		if c.bad && !errors.Is(err, ErrUnknownClass) {
			t.Errorf("Parse(%q): %v does not wrap ErrUnknownClass", c.in, err)
		}
	}
}

func TestWithClassesDisabledAPriorityHeaderIsTheDefault(t *testing.T) {
	cl := NewClasses(Config{})
	if cl.Enabled() {
		t.Fatal("one class: disabled")
	}
	for _, v := range []string{"system", "-1", "0", "nonsense"} {
		if c, err := cl.Parse(v); err != nil || c != cl.Default() {
			t.Errorf("Parse(%q) = %d, %v; want the default, no error", v, c, err)
		}
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		flag string
	}{
		{Config{Classes: []string{"a", "a"}}, "--priority-classes"},
		{Config{Classes: []string{"a b"}}, "--priority-classes"},
		{Config{Classes: []string{"a", "b"}, Default: "c"}, "--priority-default-class"},
		{Config{Classes: []string{"a", "b"}, Reserved: map[string]int{"c": 1}}, "--priority-reserved"},
		{Config{Classes: []string{"a", "b"}, Reserved: map[string]int{"a": -1}}, "--priority-reserved"},
		{Config{QueueSize: -1}, "--queue-size"},
		{Config{TenantMaxInFlight: -1}, "--tenant-max-inflight"},
	} {
		err := c.cfg.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.flag)
		}
	}
	if err := (Config{Classes: DefaultClasses, Reserved: map[string]int{"system": 1}}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestParseReserved(t *testing.T) {
	got, err := ParseReserved("system=1, interactive=4")
	if err != nil || got["system"] != 1 || got["interactive"] != 4 || len(got) != 2 {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := ParseReserved("system"); err == nil {
		t.Fatal("no =: refused")
	}
}
