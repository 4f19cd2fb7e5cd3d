package main

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/valyala/fastjson"
)

// faultMode names one way the worker misbehaves (DESIGN.md section 7).
type faultMode string

// The fault modes.
const (
	faultNone       faultMode = "none"
	faultCrash      faultMode = "crash"       // exit with code 3, after DelayMs if set
	faultErrors     faultMode = "errors"      // answer a Rate share of inference requests with 500
	faultWedge      faultMode = "wedge"       // health stays green, requests never progress
	faultDegrade    faultMode = "degrade"     // every engine step takes Factor times longer
	faultSlowHealth faultMode = "slow_health" // /health answers after DelayMs
	// faultMuteKV: the engine serves and caches, but its KV events stop going out (they are
	// numbered and kept for replay, as batches a stalled PUB socket dropped).
	faultMuteKV faultMode = "mute_kv_events"
	// faultGarbleKV: the engine's KV events go out as noise that decodes as
	// no batch (numbered as ever): a broken or hostile publisher.
	faultGarbleKV faultMode = "garble_kv_events"
	// faultCutStreams: every stream, those under way included, is cut (its connection closed,
	// the generation dropped) before it sends more than After token chunks: an engine that dies
	// mid-stream, without the process going.
	faultCutStreams faultMode = "cut_streams"
	// faultErrorStreams: every stream sends an engine error event in place of its token chunk
	// number After+1, then [DONE], as vLLM does when a generation fails.
	faultErrorStreams faultMode = "error_streams"
)

// Defaults for a fault's parameters left out of its description.
const (
	defaultErrorRate     = 1.0
	defaultDegradeFactor = 10.0
	defaultHealthDelay   = 2000
	crashExitCode        = 3
)

// errBadFault is wrapped by every error parseFault returns.
var errBadFault = errors.New("invalid fault")

// fault is the current misbehaviour, as set by --fault or POST /admin/fault.
type fault struct {
	Mode    faultMode
	Rate    float64 // share of inference requests failed (errors), 0..1
	Factor  float64 // slowdown factor (degrade), > 0
	DelayMs int64   // wall-clock delay (not scaled by --time-scale) before exiting (crash) or answering /health (slow_health), >= 0
	After   int64   // token chunks a stream sends before it is cut (cut_streams, error_streams), >= 0
}

// parseFault reads a fault description: the JSON object of the admin API
// {"mode","rate","factor","delay_ms"}, or for convenience on the command line a bare mode name.
// Parameters left out take their defaults.
func parseFault(text string) (fault, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return fault{Mode: faultNone}, nil
	}
	if !strings.HasPrefix(text, "{") {
		return defaultFault(faultMode(text)).validate()
	}
	v, err := fastjson.Parse(text)
	if err != nil {
		return fault{}, fmt.Errorf("%w: %w", errBadFault, err)
	}
	return faultFromJSON(v)
}

func faultFromJSON(v *fastjson.Value) (fault, error) {
	if v.Type() != fastjson.TypeObject {
		return fault{}, fmt.Errorf("%w: want a JSON object", errBadFault)
	}
	m := v.Get("mode")
	if m == nil || m.Type() != fastjson.TypeString {
		return fault{}, fmt.Errorf("%w: mode must be a string", errBadFault)
	}
	mode := m.GetStringBytes()
	var err error
	f := defaultFault(faultMode(mode))
	if f.Rate, err = optionalFloat(v, "rate", f.Rate); err != nil {
		return fault{}, err
	}
	if f.Factor, err = optionalFloat(v, "factor", f.Factor); err != nil {
		return fault{}, err
	}
	delay, err := optionalFloat(v, "delay_ms", float64(f.DelayMs))
	if err != nil {
		return fault{}, err
	}
	f.DelayMs = int64(min(delay, math.MaxInt32))
	after, err := optionalFloat(v, "after", 0)
	if err != nil {
		return fault{}, err
	}
	f.After = int64(min(after, math.MaxInt32))
	return f.validate()
}

// defaultFault returns the fault of a mode with every parameter at its default.
func defaultFault(mode faultMode) fault {
	f := fault{Mode: mode, Rate: defaultErrorRate, Factor: defaultDegradeFactor}
	if mode == faultSlowHealth {
		f.DelayMs = defaultHealthDelay
	}
	return f
}

// optionalFloat reads a non-negative number field, returning def when it is absent or null.
func optionalFloat(v *fastjson.Value, key string, def float64) (float64, error) {
	field := v.Get(key)
	if field == nil || field.Type() == fastjson.TypeNull {
		return def, nil
	}
	f, err := field.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, fmt.Errorf("%w: %s must be a non-negative number", errBadFault, key)
	}
	return f, nil
}

// validate checks the mode and the parameters it uses, and clears the others.
func (f fault) validate() (fault, error) {
	switch f.Mode {
	case faultNone, faultWedge, faultMuteKV, faultGarbleKV:
		return fault{Mode: f.Mode}, nil
	case faultCrash:
		return fault{Mode: f.Mode, DelayMs: f.DelayMs}, nil
	case faultErrors:
		if f.Rate > 1 {
			return fault{}, fmt.Errorf("%w: rate %v must be within 0..1", errBadFault, f.Rate)
		}
		return fault{Mode: f.Mode, Rate: f.Rate}, nil
	case faultDegrade:
		if f.Factor == 0 {
			return fault{}, fmt.Errorf("%w: factor must be positive", errBadFault)
		}
		return fault{Mode: f.Mode, Factor: f.Factor}, nil
	case faultSlowHealth:
		return fault{Mode: f.Mode, DelayMs: f.DelayMs}, nil
	case faultCutStreams, faultErrorStreams:
		return fault{Mode: f.Mode, After: f.After}, nil
	}
	return fault{}, fmt.Errorf("%w: unknown mode %q (want none, crash, errors, wedge, degrade, slow_health, mute_kv_events, garble_kv_events, cut_streams or error_streams)",
		errBadFault, f.Mode)
}

// appendJSON appends the fault as the admin API shows it.
func (f fault) appendJSON(dst []byte) []byte {
	return fmt.Appendf(dst, `{"mode":%q,"rate":%v,"factor":%v,"delay_ms":%d,"after":%d}`,
		string(f.Mode), f.Rate, f.Factor, f.DelayMs, f.After)
}

// slowdown is the engine slowdown factor the fault implies.
func (f fault) slowdown() float64 {
	if f.Mode == faultDegrade {
		return f.Factor
	}
	return 1
}
