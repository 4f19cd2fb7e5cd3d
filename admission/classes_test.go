package admission

import (
	"errors"
	"testing"
)

func TestClassesParse(t *testing.T) {
	cl := NewClasses(SchedulerConfig{Classes: DefaultClasses})
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
	cl := NewClasses(SchedulerConfig{})
	if cl.Enabled() {
		t.Fatal("one class: disabled")
	}
	for _, v := range []string{"system", "-1", "0", "nonsense"} {
		if c, err := cl.Parse(v); err != nil || c != cl.Default() {
			t.Errorf("Parse(%q) = %d, %v; want the default, no error", v, c, err)
		}
	}
}
