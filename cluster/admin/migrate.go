package admin

import (
	"net/http"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/store"
)

// DefaultMigrateWait is Config.MigrateWait when unset.
const DefaultMigrateWait = 10 * time.Second

// migration drains a worker, moves this replica's streams off it and
// removes it: registry and apply are the admin API's, move and streamsOn
// Config.MoveStreams and Config.StreamsOn, wait Config.MigrateWait.
type migration struct {
	registry  func() *store.Registry
	apply     func(cmd store.Command) (store.Result, error)
	move      func(id store.WorkerID) int
	streamsOn func(id store.WorkerID) int
	wait      time.Duration
}

// serve serves DELETE /workers/{id}?drain=migrate: the worker
// is drained (no new request goes to it, on any replica), this replica's
// streams on it move to other workers at their next chunk boundary, and
// once none is left on it (or MigrateWait passed) it is removed. The
// streams that cannot resume finish on it meanwhile.
func (m *migration) serve(ctx *fasthttp.RequestCtx, id store.WorkerID) {
	if m.move == nil || m.streamsOn == nil {
		WriteError(ctx, &statusError{http.StatusBadRequest, "invalid_request_error", "drain=migrate is not served by this replica"})
		return
	}
	before, _ := m.registry().Worker(id)
	if _, err := m.apply(store.NewSetWorkerState(id, store.StateDraining)); err != nil {
		WriteError(ctx, err)
		return
	}
	start := time.Now()
	moved := m.move(id)
	left := m.awaitStreamsGone(id, start.Add(m.waitOrDefault()))
	if _, err := m.apply(store.NewRemoveWorker(id)); err != nil {
		WriteError(ctx, err)
		return
	}
	before.ID = id
	WriteJSON(ctx, http.StatusOK, adminapi.RemovedWorker{Worker: before, MovedStreams: moved, StreamsLeft: left,
		Seconds: time.Since(start).Seconds()})
}

func (m *migration) waitOrDefault() time.Duration {
	if m.wait > 0 {
		return m.wait
	}
	return DefaultMigrateWait
}

// migratePoll is how often the wait looks at the worker's requests; each
// look also asks the streams that became movable since to move.
const migratePoll = 10 * time.Millisecond

// awaitStreamsGone waits until this replica has no request on worker id,
// or until deadline, and returns how many are left.
func (m *migration) awaitStreamsGone(id store.WorkerID, deadline time.Time) int {
	t := time.NewTicker(migratePoll)
	defer t.Stop()
	for {
		left := m.streamsOn(id)
		if left == 0 || !time.Now().Before(deadline) {
			return left
		}
		<-t.C
		m.move(id)
	}
}
