package link

import "fmt"

// FlagError is a configuration error that names the flag at fault, such as
// a cluster TLS file that does not load.
type FlagError struct {
	Flag string
	Msg  string
}

func (e *FlagError) Error() string { return fmt.Sprintf("--%s: %s", e.Flag, e.Msg) }

func flagErr(flag, format string, args ...any) error {
	return &FlagError{Flag: flag, Msg: fmt.Sprintf(format, args...)}
}
