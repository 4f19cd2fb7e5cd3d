package health

import "errors"

var (
	// ErrUnknownWorker: the worker id is not among the Targets given to SetWorkers.
	ErrUnknownWorker = errors.New("unknown worker")
	// ErrCircuitOpen: the worker's circuit is open, or half-open with every trial
	// slot taken; select another worker.
	ErrCircuitOpen = errors.New("worker circuit open")
	// ErrBadTarget: a Target's URL cannot be probed (not http or https, no host).
	ErrBadTarget = errors.New("bad worker target")
	// ErrAlreadyRunning: Run was called while another Run of the same Monitor is active.
	ErrAlreadyRunning = errors.New("health monitor already running")
	// ErrProbeFailed wraps the reason an active check failed.
	ErrProbeFailed = errors.New("health probe failed")
)
