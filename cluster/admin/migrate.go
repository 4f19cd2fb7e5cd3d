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

// migrateAndRemove serves DELETE /workers/{id}?drain=migrate: the worker
// is drained (no new request goes to it, on any replica), this replica's
// streams on it move to other workers at their next chunk boundary, and
// once none is left on it (or MigrateWait passed) it is removed. The
// streams that cannot resume finish on it meanwhile.
func (a *Admin) migrateAndRemove(ctx *fasthttp.RequestCtx, id store.WorkerID) {
	if a.cfg.MoveStreams == nil || a.cfg.StreamsOn == nil {
		WriteError(ctx, &statusError{http.StatusBadRequest, "invalid_request_error", "drain=migrate is not served by this replica"})
		return
	}
	before, _ := a.cfg.Registry().Worker(id)
	if _, err := a.apply(store.NewSetWorkerState(id, store.StateDraining)); err != nil {
		WriteError(ctx, err)
		return
	}
	start := time.Now()
	moved := a.cfg.MoveStreams(id)
	left := a.awaitStreamsGone(id, start.Add(a.migrateWait()))
	if _, err := a.apply(store.NewRemoveWorker(id)); err != nil {
		WriteError(ctx, err)
		return
	}
	before.ID = id
	WriteJSON(ctx, http.StatusOK, adminapi.RemovedWorker{Worker: before, MovedStreams: moved, StreamsLeft: left,
		Seconds: time.Since(start).Seconds()})
}

func (a *Admin) migrateWait() time.Duration {
	if a.cfg.MigrateWait > 0 {
		return a.cfg.MigrateWait
	}
	return DefaultMigrateWait
}

// migratePoll is how often the wait looks at the worker's requests; each
// look also asks the streams that became movable since to move.
const migratePoll = 10 * time.Millisecond

// awaitStreamsGone waits until this replica has no request on worker id,
// or until deadline, and returns how many are left.
func (a *Admin) awaitStreamsGone(id store.WorkerID, deadline time.Time) int {
	t := time.NewTicker(migratePoll)
	defer t.Stop()
	for {
		left := a.cfg.StreamsOn(id)
		if left == 0 || !time.Now().Before(deadline) {
			return left
		}
		<-t.C
		a.cfg.MoveStreams(id)
	}
}
