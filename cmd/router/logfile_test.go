package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTheLogDirHasAFileADayAndKeepsAWeek(t *testing.T) {
	dir := t.TempDir()
	day := time.Date(2026, 11, 1, 23, 0, 0, 0, time.UTC)
	f, err := openDailyFile(dir, "router-n1.log", 3, func() time.Time { return day })
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := f.Write([]byte("a line\n")); err != nil {
			t.Fatal(err)
		}
		day = day.Add(24 * time.Hour)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "router-n1.log.*"))
	if len(names) != 3 || !strings.HasSuffix(names[2], "router-n1.log.2026-11-05") {
		t.Fatalf("files %v, want the last three days", names)
	}
	b, _ := os.ReadFile(names[2])
	if string(b) != "a line\n" {
		t.Fatalf("last file holds %q", b)
	}
}
