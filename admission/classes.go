package admission

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DefaultClasses are the classes of a Config that names none, highest
// first: the spellings of SGLang's gateway, so that its clients' headers
// mean the same here.
var DefaultClasses = []string{"system", "interactive", "default", "bulk"}

// DefaultClass is the class of a request that names none.
const DefaultClass = "default"

// Class is a class's rank: 0 is the highest.
type Class uint8

// MaxClasses bounds how many classes a Config may name.
const MaxClasses = 16

// ErrUnknownClass: a request named a class this replica does not have.
var ErrUnknownClass = errors.New("unknown priority class")

// Classes resolves the class a request names.
type Classes struct {
	names []string
	def   Class
	// enabled is false with a single class: priority headers then mean
	// nothing and are ignored.
	enabled bool
}

// NewClasses returns the resolver of c's classes. c must be valid.
func NewClasses(c SchedulerConfig) Classes {
	c = c.withDefaults()
	cl := Classes{names: c.Classes, enabled: len(c.Classes) > 1}
	for i, n := range c.Classes {
		if n == c.Default {
			cl.def = Class(i)
		}
	}
	return cl
}

// Default is the class of a request that names none.
func (c Classes) Default() Class { return c.def }

// Len is the number of classes.
func (c Classes) Len() int { return len(c.names) }

// Name is class k's name.
func (c Classes) Name(k Class) string { return c.names[k] }

// Enabled reports whether there is more than one class to choose from.
func (c Classes) Enabled() bool { return c.enabled }

// Parse resolves a header's value: a class name (any case), or a rank
// 0..Len()-1 (0 the highest). An empty value, or any value while classes
// are disabled, is the default class. A negative rank, one past the lowest
// class or an unknown name wraps ErrUnknownClass, so that a typo is a 400
// and never a silent top priority.
func (c Classes) Parse(v string) (Class, error) {
	v = strings.TrimSpace(v)
	if v == "" || !c.enabled {
		return c.def, nil
	}
	for i, n := range c.names {
		if strings.EqualFold(n, v) {
			return Class(i), nil
		}
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 || n >= len(c.names) {
			return 0, fmt.Errorf("%w: rank %d, the ranks are 0 (%s) to %d (%s)", ErrUnknownClass, n, c.names[0],
				len(c.names)-1, c.names[len(c.names)-1])
		}
		return Class(n), nil
	}
	return 0, fmt.Errorf("%w: %.40q, the classes are %s", ErrUnknownClass, v, strings.Join(c.names, ", "))
}
