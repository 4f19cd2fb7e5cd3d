package sim

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
)

// TestPriorityFigures prints, in virtual time (no machine noise), the
// engine's share of the interactive TTFT of scripts/prioritybench's
// priority scenario: one engine of 4 sequences, one closed-loop interactive
// client (16-token prompts, 8 tokens out, 100 ms think) alone, under a
// bulk flood (256-token prompts, 256 out, always more waiting at the
// router) held to 3 sequences with the fourth reserved and idle, and with
// the fourth lent to bulk and taken back by priority preemption. The
// router's share (HTTP, admission) is not in it. Run with
// SIM_PRIORITY_FIGURES=1 go test -run TestPriorityFigures -v ./sim/
func TestPriorityFigures(t *testing.T) {
	if os.Getenv("SIM_PRIORITY_FIGURES") == "" {
		t.Skip("set SIM_PRIORITY_FIGURES=1 to print the figures")
	}
	const horizon = 600 * time.Second
	var alone time.Duration
	t.Log("| engine | interactive TTFT p50 ms | p99 ms | p99 / alone | bulk tokens/s | preemptions |")
	t.Log("|---|---|---|---|---|---|")
	for _, m := range []struct {
		name  string
		bulk  int // bulk sequences the router lets in while no interactive runs
		lends bool
	}{{"interactive alone", 0, false}, {"bulk flood, reserved slot idle", 3, false}, {"bulk flood, slot lent, priority preemption", 4, true}} {
		ttfts, tokens, preempted := priorityScenario(m.bulk, m.lends, horizon)
		slices.Sort(ttfts)
		p50, p99 := ttfts[len(ttfts)/2], ttfts[len(ttfts)*99/100]
		if m.bulk == 0 {
			alone = p99
		}
		t.Log(fmt.Sprintf("| %s | %.1f | %.1f | %.2f | %.0f | %d |", m.name, ms(p50), ms(p99), float64(p99)/float64(alone),
			float64(tokens)/horizon.Seconds(), preempted))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// priorityScenario drives one engine until horizon and returns the
// interactive TTFTs, the bulk tokens generated and the preemptions. The
// router's rule is played: bulk in flight (running or preempted) plus
// interactive stays at most 4, and at most bulk while no interactive runs;
// with lends the interactive request goes even when bulk holds all 4.
func priorityScenario(bulk int, lends bool, horizon time.Duration) ([]time.Duration, int, uint64) {
	e := NewEngine(Config{MaxNumSeqs: 4, PriorityScheduling: lends})
	const inter = RequestID(1)
	var ttfts []time.Duration
	nextID, bulkIn, interIn, tokens := RequestID(2), 0, 0, 0
	nextInter, interAt := time.Second, time.Duration(0)
	refill := func(now time.Duration) {
		for bulkIn+interIn < 4 && bulkIn < bulk {
			_ = e.Submit(Request{ID: nextID, Prompt: text(int(nextID), 1024), MaxTokens: 256, Priority: 3}, now)
			nextID++
			bulkIn++
		}
	}
	handle := func(evs []Event) {
		for _, ev := range evs {
			switch {
			case ev.ID == inter && ev.Kind == FirstToken:
				ttfts = append(ttfts, ev.At-interAt)
			case ev.ID == inter && ev.Kind == Done:
				interIn, nextInter = 0, ev.At+100*time.Millisecond
				refill(ev.At)
			case ev.Kind == Done:
				bulkIn--
				tokens += ev.Usage.Completion
				refill(ev.At)
			}
		}
	}
	refill(0)
	for {
		at, ok := e.NextEventAt()
		if !ok || at > nextInter {
			if nextInter > horizon {
				return ttfts, tokens, e.Preemptions()
			}
			handle(e.Advance(nextInter))
			interAt, interIn = nextInter, 1
			_ = e.Submit(Request{ID: inter, Prompt: text(int(nextID), 64), MaxTokens: 8, Priority: 1}, interAt)
			nextID++
			nextInter = horizon + time.Hour
			continue
		}
		handle(e.Advance(at))
	}
}
