package kvevents

import "time"

// The side of a View that this replica's own connection to the engine
// drives (subscriber.go dials the engine, bind.go takes an engine that
// dials in): live batches, and the replays that fill their gaps.

// Connected says this replica now has a connection to the engine. The
// stream rejoins (Stream.Rejoin): the set is kept, and the view is Unheard
// until a batch or a replay shows where the engine stands.
func (v *View) Connected() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stream.Rejoin()
	v.watch.connected, v.watch.heard, v.watch.expecting = true, false, time.Time{}
}

// Disconnected says the connection ended.
func (v *View) Disconnected() {
	v.mu.Lock()
	v.watch.connected = false
	v.mu.Unlock()
}

// Offer takes a live batch; gap says batches are missing before it and
// from which number to replay them (Replayed for each, then EndReplay; or
// EndReplay alone when there is no replay to be had).
//
// A batch under another topic than the last one heard is another stream
// (the engine at the address is not the one it was, or names itself
// otherwise now): the set is emptied and the stream starts over.
func (v *View) Offer(topic string, seq uint64, payload []byte) (from uint64, gap bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.topic != topic {
		if v.topic != "" {
			v.stream.Retopic()
		}
		v.topic = topic
	}
	from, gap = v.stream.Offer(seq, payload)
	v.watch.replaying = gap
	v.noteLocked(!gap)
	return from, gap
}

// Replayed takes a batch from the engine's replay socket.
func (v *View) Replayed(seq uint64, payload []byte) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stream.Replayed(seq, payload)
	v.noteLocked(false)
}

// EndReplay ends the replay of a gap: the live batch that revealed it is
// applied, after whatever the replay brought.
func (v *View) EndReplay() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stream.EndReplay()
	v.watch.replaying = false
	v.noteLocked(true)
}

// CatchUp begins the replay a new connection asks for before any live
// batch (Stream.CatchUp); ok is false when there is nothing to catch up.
func (v *View) CatchUp() (from uint64, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	from, ok = v.stream.CatchUp()
	v.watch.replaying = ok
	v.caughtFrom = v.stream.Stats().Batches
	return from, ok
}

// EndCatchUp ends a catch-up. One that brought batches is heard: the set
// holds what the engine kept; one that brought nothing leaves the view
// Unheard until a live batch.
func (v *View) EndCatchUp() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stream.EndCatchUp()
	v.watch.replaying = false
	v.noteLocked(v.stream.Stats().Batches > v.caughtFrom)
}

// Unparsable counts a message that is not [topic, sequence, payload].
func (v *View) Unparsable() {
	v.mu.Lock()
	v.stream.stats.Unparsable++
	v.mu.Unlock()
}
