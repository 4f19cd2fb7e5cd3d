package kvevents

// OpKind is one change to a Set, as a peer replays it.
type OpKind uint8

const (
	// OpStore: the engine holds Key under the name fingerprint FP.
	OpStore OpKind = iota + 1
	// OpRemove: the engine dropped the block named FP.
	OpRemove
	// OpReset: the set was emptied (the engine cleared its cache).
	OpReset
)

// Op is one change to a Set. Applying a set's ops in order to another set
// of the same limit gives the same set: what a replica that hears an engine
// sends its peers (relay.go), so that each holds what the engine's events
// said without hearing the engine.
type Op struct {
	Kind OpKind
	FP   uint32
	Key  Key
}

// ApplyOps changes the set by ops, in order. Refusals (a full set) are
// counted in what it returns: the relaying replica had the same ones.
func (s *Set) ApplyOps(ops []Op) (refused int) {
	for _, op := range ops {
		switch op.Kind {
		case OpStore:
			if s.StoreName(op.FP, op.Key) != nil {
				refused++
			}
		case OpRemove:
			s.RemoveName(op.FP)
		case OpReset:
			s.Reset()
		}
	}
	return refused
}

// Record makes the set append every change it makes from now on to ops
// (nil: stop recording).
func (s *Set) Record(ops *[]Op) { s.rec = ops }

func (s *Set) record(kind OpKind, fp uint32, key Key) {
	if s.rec != nil {
		*s.rec = append(*s.rec, Op{Kind: kind, FP: fp, Key: key})
	}
}
