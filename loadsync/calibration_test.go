package loadsync

import (
	"slices"
	"sync"
	"testing"
)

// heardCalibrations records what OnCalibration reported.
type heardCalibrations struct {
	mu sync.Mutex
	cs []Calibration
}

func (h *heardCalibrations) add(c Calibration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cs = append(h.cs, c)
}

func (h *heardCalibrations) all() []Calibration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.cs)
}

// calibrationReplica is a replica that knows workers 1-8 and records its
// peers' calibrations.
func calibrationReplica(t *testing.T, origin string) (*replica, *heardCalibrations) {
	h := &heardCalibrations{}
	r := newReplica(t, origin, func(c *Config) {
		c.OnCalibration = h.add
		c.KnownWorker = func(w uint32) bool { return w >= 1 && w <= 8 }
	})
	return r, h
}

func TestJudgementsReachPeersSummedPerWorkerWithTheNextReport(t *testing.T) {
	a, _ := calibrationReplica(t, "a")
	b, heard := calibrationReplica(t, "b")
	for _, j := range []struct {
		w    uint32
		held bool
	}{{5, false}, {3, true}, {5, false}, {5, true}, {3, true}, {5, false}} {
		a.st.Judged(j.w, j.held)
	}
	deliver(t, a.st.Tick(t0), t0, b)
	want := []Calibration{{Worker: 3, Held: 2}, {Worker: 5, Held: 1, Missed: 3}}
	if got := heard.all(); !slices.Equal(got, want) {
		t.Fatalf("b heard %+v, want %+v", got, want)
	}
	deliver(t, a.st.Tick(t0.Add(DefaultLoadInterval)), t0.Add(DefaultLoadInterval), b)
	if got := heard.all(); len(got) != len(want) {
		t.Fatalf("b heard %+v after a second report with no new judgement: want them sent once", got)
	}
	if st := a.st.Stats(); st.CalibrationsSent != 2 {
		t.Errorf("a counts %d calibrations sent, want 2", st.CalibrationsSent)
	}
}

func TestCalibrationsOfUnknownWorkersAndOwnAreDropped(t *testing.T) {
	b, heard := calibrationReplica(t, "b")
	pkt := appendCalibrations(nil, "a", []Calibration{{Worker: 9, Missed: 1}, {Worker: 2, Missed: 1}})
	if err := b.st.Receive(pkt, t0); err != nil {
		t.Fatal(err)
	}
	if err := b.st.Receive(appendCalibrations(nil, "b", []Calibration{{Worker: 4, Missed: 1}}), t0); err != nil {
		t.Fatal(err)
	}
	if got, want := heard.all(), []Calibration{{Worker: 2, Missed: 1}}; !slices.Equal(got, want) {
		t.Fatalf("b heard %+v, want only worker 2's (9 is not in its registry, and its own are not news)", got)
	}
}

func TestAForgedCalibrationCountIsCapped(t *testing.T) {
	b, heard := calibrationReplica(t, "b")
	pkt := appendCalibrations(nil, "a", []Calibration{{Worker: 1, Held: 1 << 30, Missed: 1 << 31}})
	if err := b.st.Receive(pkt, t0); err != nil {
		t.Fatal(err)
	}
	want := []Calibration{{Worker: 1, Held: maxCalibrationCount, Missed: maxCalibrationCount}}
	if got := heard.all(); !slices.Equal(got, want) {
		t.Fatalf("b heard %+v, want the counts capped at %d", got, maxCalibrationCount)
	}
}

func TestPendingCalibrationsAreBoundedByWorkers(t *testing.T) {
	a, _ := calibrationReplica(t, "a")
	for w := range uint32(maxCalibrationWorkers + 10) {
		a.st.Judged(w, false)
	}
	a.st.Judged(0, true) // a worker already pending is still counted
	if st := a.st.Stats(); st.CalibrationsDropped != 10 {
		t.Fatalf("%d judgements dropped, want the 10 beyond %d workers", st.CalibrationsDropped, maxCalibrationWorkers)
	}
	var sent int
	for _, p := range a.st.Tick(t0) {
		if p[0] != msgReport {
			continue
		}
		if len(p) > DefaultMaxPacketBytes {
			t.Fatalf("a report packet of %d bytes, over %d", len(p), DefaultMaxPacketBytes)
		}
		_, r, _ := readHeader(p)
		rep, err := decodeReportPacket(&r)
		if err != nil {
			t.Fatal(err)
		}
		sent += len(rep.calibs)
	}
	if sent != maxCalibrationWorkers {
		t.Fatalf("%d calibrations sent, want %d", sent, maxCalibrationWorkers)
	}
}

func TestTruncatedCalibrationsAreRefused(t *testing.T) {
	b, heard := calibrationReplica(t, "b")
	pkt := appendCalibrations(nil, "a", []Calibration{{Worker: 1, Missed: 1}, {Worker: 2, Missed: 1}})
	if err := b.st.Receive(pkt[:len(pkt)-1], t0); err == nil {
		t.Fatal("a truncated packet was accepted")
	}
	if got := heard.all(); len(got) != 0 {
		t.Fatalf("b heard %+v from a packet it refused", got)
	}
}
