package admission

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateNamesTheFlag(t *testing.T) {
	for _, c := range []struct {
		cfg  SchedulerConfig
		flag string
	}{
		{SchedulerConfig{Classes: []string{"a", "a"}}, "--priority-classes"},
		{SchedulerConfig{Classes: []string{"a b"}}, "--priority-classes"},
		{SchedulerConfig{Classes: []string{"a", "b"}, Default: "c"}, "--priority-default-class"},
		{SchedulerConfig{Classes: []string{"a", "b"}, Reserved: map[string]int{"c": 1}}, "--priority-reserved"},
		{SchedulerConfig{Classes: []string{"a", "b"}, Reserved: map[string]int{"a": -1}}, "--priority-reserved"},
		{SchedulerConfig{QueueSize: -1}, "--queue-size"},
		{SchedulerConfig{TenantMaxInFlight: -1}, "--tenant-max-inflight"},
	} {
		err := c.cfg.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.flag)
		}
	}
	if err := (SchedulerConfig{Classes: DefaultClasses, Reserved: map[string]int{"system": 1}}).Validate(); err != nil {
		t.Fatal(err)
	}
}
