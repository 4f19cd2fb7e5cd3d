package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// dailyFile is the --log-dir log: a file a day, named <name>.YYYY-MM-DD in
// UTC as vllm-router's logs are, of which the newest keep are kept.
type dailyFile struct {
	dir, name string
	keep      int
	now       func() time.Time

	mu   sync.Mutex
	day  string
	file *os.File
}

// openDailyFile opens today's file; now is the clock (time.Now outside tests).
func openDailyFile(dir, name string, keep int, now func() time.Time) (*dailyFile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f := &dailyFile{dir: dir, name: name, keep: keep, now: now}
	return f, f.rotate(f.now().UTC().Format(time.DateOnly))
}

// Write appends p to today's file, opening a new one when the day changed.
func (f *dailyFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if day := f.now().UTC().Format(time.DateOnly); day != f.day {
		if err := f.rotate(day); err != nil {
			return 0, err
		}
	}
	return f.file.Write(p)
}

func (f *dailyFile) rotate(day string) error {
	next, err := os.OpenFile(filepath.Join(f.dir, f.name+"."+day), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("--log-dir: %w", err)
	}
	if f.file != nil {
		f.file.Close()
	}
	f.file, f.day = next, day
	f.prune()
	return nil
}

// prune removes all but the newest keep files.
func (f *dailyFile) prune() {
	old, _ := filepath.Glob(filepath.Join(f.dir, f.name+".????-??-??"))
	slices.Sort(old)
	for len(old) > f.keep {
		_ = os.Remove(old[0])
		old = old[1:]
	}
}
