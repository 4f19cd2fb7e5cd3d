package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/cluster/adminapi"
	"github.com/kvrouter/kvrouter/cluster/raftnode"
	"github.com/kvrouter/kvrouter/cluster/statuspage"
	"github.com/kvrouter/kvrouter/internal/credential"
	"github.com/kvrouter/kvrouter/store"
)

// Config wires the admin API to the rest of a replica.
type Config struct {
	// Token, when set, is the bearer token every admin request must carry
	// (--admin-token). When empty, only loopback clients are served.
	Token string
	// Registry returns the current registry (required).
	Registry func() *store.Registry
	// Apply submits a registry write (required): the Raft node's Apply,
	// or a wrapper that forwards to the leader.
	Apply func(ctx context.Context, cmd store.Command) (store.Result, error)
	// ApplyLocal applies a write that another replica forwarded here
	// (POST /cluster/apply on the cluster port, which the wiring routes here), on this node
	// only: it must not forward again. nil answers that endpoint with 404.
	ApplyLocal func(ctx context.Context, cmd store.Command) (store.Result, error)
	// Keyring applies a gossip keyring operation on every live replica
	// (keyring.go); nil answers the keyring endpoints with 404.
	Keyring func(ctx context.Context, op adminapi.KeyringOp, key []byte) ([]adminapi.NodeKeyring, error)
	// Loads returns the merged per-worker loads; nil serves an empty list.
	Loads func() []adminapi.WorkerLoad
	// Status returns the cluster status served as JSON; nil serves {}.
	Status func() any
	// WorkerStats returns this replica's per-worker figures for GET
	// /cluster/workers; nil serves {}.
	WorkerStats func() any
	// History returns this replica's recent samples for GET
	// /cluster/history; nil serves {}.
	History func() any
	// ApplyTimeout bounds each write, forwarding included; default 10 s.
	ApplyTimeout time.Duration
	// AllowWorker, when set, vets the URL of a worker about to be added
	// (--allowed-worker-hosts); a refused one is a 400.
	AllowWorker func(url string) error
	// FlushCache serves POST /flush_cache (every worker's prefix cache
	// emptied); nil answers 404.
	FlushCache func(ctx *fasthttp.RequestCtx)
	// Routing and SetRouting serve GET and PUT /cluster/routing, the
	// tier's routing config; nil answers 404.
	Routing    func() adminapi.RoutingView
	SetRouting func(ctx context.Context, v adminapi.RoutingView) (adminapi.RoutingView, error)
	// MoveStreams asks this replica's streams on a worker to move to
	// other workers at their next chunk boundary, and returns how many it
	// asked; StreamsOn counts this replica's requests still on the worker.
	// They serve DELETE /workers/{id}?drain=migrate (migrate.go); nil
	// answers it with 400.
	MoveStreams func(id store.WorkerID) int
	StreamsOn   func(id store.WorkerID) int
	// MigrateWait bounds how long drain=migrate waits for the worker's
	// requests to leave it before it is removed; default 10 s.
	MigrateWait time.Duration
}

// DefaultApplyTimeout is Config.ApplyTimeout when unset.
const DefaultApplyTimeout = 10 * time.Second

// MaxBody bounds a POST /workers body.
const MaxBody = store.MaxCommandBytes

// Admin serves the admin API of a replica: worker registry reads and writes
// (writes go through Raft), merged loads, cluster status, and vllm-router's
// legacy worker endpoints. Safe for concurrent use by fasthttp's handlers.
type Admin struct {
	cfg       Config
	tokenHash [sha256.Size]byte
	// keyring serves the gossip keyring's endpoints (keyring.go).
	keyring keyringEndpoints
	// migration serves DELETE /workers/{id}?drain=migrate (migrate.go).
	migration migration
}

// New returns the admin API. Registry and Apply are required: a nil
// one is a programming error and panics here rather than on a request.
func New(cfg Config) *Admin {
	if cfg.Registry == nil || cfg.Apply == nil {
		panic("admin.New: Config.Registry and Config.Apply are required")
	}
	if cfg.ApplyTimeout <= 0 {
		cfg.ApplyTimeout = DefaultApplyTimeout
	}
	a := &Admin{cfg: cfg, tokenHash: sha256.Sum256([]byte(cfg.Token)),
		keyring: keyringEndpoints{keyring: cfg.Keyring, timeout: cfg.ApplyTimeout}}
	a.migration = migration{registry: cfg.Registry, apply: a.apply, move: cfg.MoveStreams, streamsOn: cfg.StreamsOn,
		wait: cfg.MigrateWait}
	return a
}

// handler serves one method of one admin endpoint; id is the worker id of
// the /workers/{id} routes and 0 elsewhere.
type handler func(a *Admin, ctx *fasthttp.RequestCtx, id store.WorkerID)

// endpoint maps methods to handlers.
type endpoint map[string]handler

var (
	fixedEndpoints = map[string]endpoint{
		"/workers":         {http.MethodGet: (*Admin).listWorkers, http.MethodPost: (*Admin).createWorker},
		"/get_loads":       {http.MethodGet: (*Admin).getLoads},
		"/cluster/status":  {http.MethodGet: (*Admin).clusterStatus},
		"/cluster/workers": {http.MethodGet: (*Admin).clusterWorkers},
		"/cluster/history": {http.MethodGet: (*Admin).clusterHistory},
		"/cluster/routing": {http.MethodGet: (*Admin).getRouting, http.MethodPut: (*Admin).putRouting},
		"/add_worker":      {http.MethodPost: (*Admin).legacyAddWorker},
		"/remove_worker":   {http.MethodPost: (*Admin).legacyRemoveWorker},
		"/list_workers":    {http.MethodGet: (*Admin).legacyListWorkers},
		"/flush_cache":     {http.MethodPost: (*Admin).flushCache},

		"/cluster/keyring":         {http.MethodGet: keyringRoute((*keyringEndpoints).list)},
		"/cluster/keyring/install": {http.MethodPost: keyringRoute((*keyringEndpoints).change)},
		"/cluster/keyring/use":     {http.MethodPost: keyringRoute((*keyringEndpoints).change)},
		"/cluster/keyring/remove":  {http.MethodPost: keyringRoute((*keyringEndpoints).change)},
	}
	workerEndpoints = map[string]endpoint{
		"":         {http.MethodGet: (*Admin).getWorker, http.MethodDelete: (*Admin).deleteWorker},
		"drain":    {http.MethodPost: (*Admin).drainWorker},
		"activate": {http.MethodPost: (*Admin).activateWorker},
	}
)

// Serve handles ctx and returns true when its path belongs to the admin API;
// otherwise it returns false without touching ctx, so the caller can route
// the request elsewhere.
func (a *Admin) Serve(ctx *fasthttp.RequestCtx) bool {
	if statuspage.Owns(string(ctx.Path())) {
		a.servePage(ctx)
		return true
	}
	ep, id, routeErr, ok := resolve(string(ctx.Path()))
	if byURL, isURL := workerURLIn(ctx); isURL {
		ep, id, routeErr, ok = workerEndpoints[""], 0, nil, true
		if w, known := a.cfg.Registry().WorkerByURL(byURL); known {
			id = w.ID
		} else {
			routeErr = fmt.Errorf("%w: no worker with url %s", store.ErrUnknownWorker, byURL)
		}
	}
	if !ok {
		return false
	}
	if err := a.authorize(ctx); err != nil {
		WriteError(ctx, err)
		return true
	}
	if routeErr != nil {
		WriteError(ctx, routeErr)
		return true
	}
	if err := boundBody(ctx, MaxBody); err != nil {
		WriteError(ctx, err)
		return true
	}
	h, allowed := ep[string(ctx.Method())]
	if !allowed {
		ctx.Response.Header.Set("Allow", strings.Join(slices.Sorted(maps.Keys(ep)), ", "))
		WriteError(ctx, &statusError{http.StatusMethodNotAllowed, "invalid_request_error",
			fmt.Sprintf("method %s not allowed on %s", ctx.Method(), ctx.Path())})
		return true
	}
	h(a, ctx, id)
	return true
}

// servePage serves the status page (/ui). The page is only a shell: what
// it shows comes from the admin endpoints, each authorised as always, so
// with --admin-token the shell is served to anyone (a browser cannot attach
// the token to a navigation; the page asks for it and sends it itself).
// Without a token the admin API's loopback and Host rules apply to the
// page too, so a page elsewhere cannot load it by a rebound name.
func (a *Admin) servePage(ctx *fasthttp.RequestCtx) {
	if a.cfg.Token == "" {
		if err := a.authorize(ctx); err != nil {
			WriteError(ctx, err)
			return
		}
	}
	statuspage.Serve(ctx)
}

// workerURLIn reads vllm-router's /workers/{url}: a worker named by its
// URL, escaped or not, rather than by its id (GET and DELETE).
func workerURLIn(ctx *fasthttp.RequestCtx) (string, bool) {
	rest, found := strings.CutPrefix(string(ctx.Request.URI().PathOriginal()), "/workers/")
	if !found {
		return "", false
	}
	raw, err := url.PathUnescape(rest)
	if err != nil || !strings.HasPrefix(raw, "http://") && !strings.HasPrefix(raw, "https://") {
		return "", false
	}
	return raw, true
}

// resolve maps a path to its endpoint. ok is false for non-admin paths;
// routeErr is set for a path under /workers/ that names no endpoint.
func resolve(path string) (ep endpoint, id store.WorkerID, routeErr error, ok bool) {
	if ep, found := fixedEndpoints[path]; found {
		return ep, 0, nil, true
	}
	rest, found := strings.CutPrefix(path, "/workers/")
	if !found {
		return nil, 0, nil, false
	}
	idText, action, _ := strings.Cut(rest, "/")
	ep, found = workerEndpoints[action]
	if !found {
		return nil, 0, &statusError{http.StatusNotFound, "not_found_error", "no admin endpoint " + path}, true
	}
	n, err := strconv.ParseUint(idText, 10, 32)
	if err != nil || n == 0 {
		return nil, 0, &store.FieldError{Field: "id", Problem: fmt.Sprintf("%q is not a worker id", idText)}, true
	}
	return ep, store.WorkerID(n), nil, true
}

// authorize applies the admin auth rule: the bearer token when one is
// configured (compared in constant time, over hashes so the length does not
// leak either), loopback clients only when not, and then only requests a
// web page could not have made (sameSite).
func (a *Admin) authorize(ctx *fasthttp.RequestCtx) error {
	if a.cfg.Token == "" {
		if !ctx.RemoteIP().IsLoopback() {
			return &statusError{http.StatusForbidden, "permission_error",
				"the admin API accepts only loopback clients unless --admin-token is set"}
		}
		return sameSite(ctx)
	}
	token, ok := credential.Bearer(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization))
	if !ok || !a.IsToken(token) {
		ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Bearer realm="router-admin"`)
		return &statusError{http.StatusUnauthorized, "authentication_error",
			"missing or wrong admin token (Authorization: Bearer <token>)"}
	}
	return nil
}

// HasToken reports whether the admin API has a token (--admin-token).
func (a *Admin) HasToken() bool { return a.cfg.Token != "" }

// IsToken reports whether token, a credential as package credential reads
// it, is the admin token: compared in constant time, over hashes so that
// the length does not leak either.
func (a *Admin) IsToken(token []byte) bool {
	got := sha256.Sum256(token)
	return a.HasToken() && subtle.ConstantTimeCompare(got[:], a.tokenHash[:]) == 1
}

// boundBody reads a streamed request body once the request is authorised,
// at most limit bytes of it (413 past that): admin bodies are small, and
// nothing of one is read before its token was checked.
func boundBody(ctx *fasthttp.RequestCtx, limit int) error {
	stream := ctx.RequestBodyStream()
	if stream == nil {
		return nil
	}
	if ctx.Request.Header.ContentLength() > limit {
		return tooLargeBody(ctx.Request.Header.ContentLength())
	}
	body, err := io.ReadAll(io.LimitReader(stream, int64(limit)+1))
	if err != nil {
		return &statusError{http.StatusBadRequest, "invalid_request_error", "the request body could not be read: " + err.Error()}
	}
	if len(body) > limit {
		return tooLargeBody(len(body))
	}
	ctx.Request.SetBodyRaw(body)
	return nil
}

func tooLargeBody(n int) error {
	return &statusError{http.StatusRequestEntityTooLarge, "invalid_request_error",
		fmt.Sprintf("body of %d bytes exceeds %d", n, MaxBody)}
}

// apply runs a write bounded by ApplyTimeout.
func (a *Admin) apply(cmd store.Command) (store.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.ApplyTimeout)
	defer cancel()
	return a.cfg.Apply(ctx, cmd)
}

func (a *Admin) listWorkers(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	WriteJSON(ctx, http.StatusOK, map[string][]store.Worker{"workers": nonNil(a.cfg.Registry().Workers())})
}

func (a *Admin) getWorker(ctx *fasthttp.RequestCtx, id store.WorkerID) {
	w, ok := a.cfg.Registry().Worker(id)
	if !ok {
		WriteError(ctx, fmt.Errorf("%w: no worker with id %d", store.ErrUnknownWorker, id))
		return
	}
	WriteJSON(ctx, http.StatusOK, w)
}

// workerRequest is the body of POST /workers.
type workerRequest struct {
	URL           string     `json:"url"`
	Role          store.Role `json:"role"`
	Model         string     `json:"model"`
	BootstrapPort int        `json:"bootstrap_port"`
	// KVEventsEndpoint: store.Worker.KVEventsEndpoint.
	KVEventsEndpoint string `json:"kv_events_endpoint"`
	// KVEventsReplayEndpoint: store.Worker.KVEventsReplayEndpoint.
	KVEventsReplayEndpoint string `json:"kv_events_replay_endpoint"`
	// KVEventsTopic: store.Worker.KVEventsTopic.
	KVEventsTopic string            `json:"kv_events_topic"`
	Labels        map[string]string `json:"labels"`
}

func (a *Admin) createWorker(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	req, err := decodeWorkerRequest(ctx.PostBody())
	if err != nil {
		WriteError(ctx, err)
		return
	}
	add := store.AddWorker{URL: req.URL, Role: req.Role, Model: req.Model, BootstrapPort: req.BootstrapPort,
		KVEventsEndpoint: req.KVEventsEndpoint, KVEventsReplayEndpoint: req.KVEventsReplayEndpoint,
		KVEventsTopic: req.KVEventsTopic, Labels: req.Labels}
	if err := errors.Join(a.allowWorker(req.URL), a.allowKVEvents("kv_events_endpoint", req.KVEventsEndpoint),
		a.allowKVEvents("kv_events_replay_endpoint", req.KVEventsReplayEndpoint)); err != nil {
		WriteError(ctx, err)
		return
	}
	res, err := a.apply(store.NewAddWorker(add))
	if err != nil {
		WriteError(ctx, err)
		return
	}
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	WriteJSON(ctx, status, a.workerOr(res.ID, addedWorker(res.ID, add)))
}

func decodeWorkerRequest(body []byte) (workerRequest, error) {
	var req workerRequest
	if len(body) > MaxBody {
		return req, &statusError{http.StatusRequestEntityTooLarge, "invalid_request_error",
			fmt.Sprintf("body of %d bytes exceeds %d", len(body), MaxBody)}
	}
	return req, decodeBody(body, &req)
}

// BadJSON turns a decoding error into a 400 that names the field when the
// decoder knows it.
func BadJSON(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return &store.FieldError{Field: typeErr.Field, Problem: "must be a JSON " + typeErr.Type.Kind().String()}
	}
	return &statusError{http.StatusBadRequest, "invalid_request_error", "malformed JSON body: " + err.Error()}
}

// allowWorker vets a worker URL against the destination policy, as a 400
// that names the field.
func (a *Admin) allowWorker(url string) error {
	if a.cfg.AllowWorker == nil {
		return nil
	}
	if err := a.cfg.AllowWorker(url); err != nil {
		return &store.FieldError{Field: "url", Problem: err.Error()}
	}
	return nil
}

// allowKVEvents vets an endpoint of an engine's events given to POST
// /workers (field) against the destination policy, as a 400 that names the
// field.
func (a *Admin) allowKVEvents(field, endpoint string) error {
	ep, err := store.NormalizeEndpointField(field, endpoint)
	if err != nil {
		return err
	}
	if ep == "" || a.cfg.AllowWorker == nil {
		return nil
	}
	if err := a.cfg.AllowWorker("http://" + ep[len("tcp://"):]); err != nil {
		return &store.FieldError{Field: field, Problem: err.Error()}
	}
	return nil
}

// addedWorker is what an AddWorker created, for when this replica's registry
// has not caught up with the write yet (it was forwarded to the leader).
func addedWorker(id store.WorkerID, add store.AddWorker) store.Worker {
	w := store.Worker{ID: id, URL: add.URL, Role: add.Role, Model: add.Model,
		BootstrapPort: add.BootstrapPort, KVEventsEndpoint: add.KVEventsEndpoint,
		KVEventsReplayEndpoint: add.KVEventsReplayEndpoint, KVEventsTopic: add.KVEventsTopic,
		Labels: add.Labels, State: store.StateActive}
	if u, err := store.NormalizeURL(add.URL); err == nil {
		w.URL = u
	}
	if w.Role == "" {
		w.Role = store.RoleRegular
	}
	return w
}

// workerOr returns worker id from the registry, or fallback when the
// registry does not hold it (yet, or any more).
func (a *Admin) workerOr(id store.WorkerID, fallback store.Worker) store.Worker {
	if w, ok := a.cfg.Registry().Worker(id); ok {
		return w
	}
	return fallback
}

func (a *Admin) deleteWorker(ctx *fasthttp.RequestCtx, id store.WorkerID) {
	switch drain := string(ctx.QueryArgs().Peek("drain")); drain {
	case "":
	case adminapi.DrainMigrate:
		a.migration.serve(ctx, id)
		return
	default:
		WriteError(ctx, &statusError{http.StatusBadRequest, "invalid_request_error",
			fmt.Sprintf("drain=%q: the one value is %q", drain, adminapi.DrainMigrate)})
		return
	}
	before, known := a.cfg.Registry().Worker(id)
	if _, err := a.apply(store.NewRemoveWorker(id)); err != nil {
		WriteError(ctx, err)
		return
	}
	if !known {
		before = store.Worker{ID: id}
	}
	WriteJSON(ctx, http.StatusOK, before)
}

func (a *Admin) drainWorker(ctx *fasthttp.RequestCtx, id store.WorkerID) {
	a.setState(ctx, id, store.StateDraining)
}

func (a *Admin) activateWorker(ctx *fasthttp.RequestCtx, id store.WorkerID) {
	a.setState(ctx, id, store.StateActive)
}

func (a *Admin) setState(ctx *fasthttp.RequestCtx, id store.WorkerID, state store.WorkerState) {
	before, _ := a.cfg.Registry().Worker(id)
	if _, err := a.apply(store.NewSetWorkerState(id, state)); err != nil {
		WriteError(ctx, err)
		return
	}
	after := a.workerOr(id, before)
	after.ID, after.State = id, state
	WriteJSON(ctx, http.StatusOK, after)
}

func (a *Admin) getLoads(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	var loads []adminapi.WorkerLoad
	if a.cfg.Loads != nil {
		loads = a.cfg.Loads()
	}
	WriteJSON(ctx, http.StatusOK, map[string][]adminapi.WorkerLoad{"workers": nonNil(loads)})
}

func (a *Admin) clusterStatus(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	var status any = struct{}{}
	if a.cfg.Status != nil {
		status = a.cfg.Status()
	}
	WriteJSON(ctx, http.StatusOK, status)
}

func (a *Admin) clusterWorkers(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	var stats any = struct{}{}
	if a.cfg.WorkerStats != nil {
		stats = a.cfg.WorkerStats()
	}
	WriteJSON(ctx, http.StatusOK, stats)
}

func (a *Admin) clusterHistory(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	var history any = struct{}{}
	if a.cfg.History != nil {
		history = a.cfg.History()
	}
	WriteJSON(ctx, http.StatusOK, history)
}

func (a *Admin) getRouting(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	if a.cfg.Routing == nil {
		WriteError(ctx, &statusError{http.StatusNotFound, "not_found_error", "this replica has no routing config"})
		return
	}
	WriteJSON(ctx, http.StatusOK, a.cfg.Routing())
}

// putRouting replaces the tier's routing config if it is still the one
// set at the body's index: 409 when another change came first (GET it
// again), 400 naming a bad field.
func (a *Admin) putRouting(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	if a.cfg.SetRouting == nil {
		WriteError(ctx, &statusError{http.StatusNotFound, "not_found_error", "this replica has no routing config"})
		return
	}
	var v adminapi.RoutingView
	if err := decodeBody(ctx.PostBody(), &v); err != nil {
		WriteError(ctx, err)
		return
	}
	apply, cancel := context.WithTimeout(context.Background(), a.cfg.ApplyTimeout)
	defer cancel()
	out, err := a.cfg.SetRouting(apply, v)
	if err != nil {
		WriteError(ctx, err)
		return
	}
	WriteJSON(ctx, http.StatusOK, out)
}

// ApplyForwarded applies a registry write forwarded by a follower. It
// answers like every admin write: the result, or an OpenAI-style error
// whose type the follower maps back to the sentinel.
func (a *Admin) ApplyForwarded(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	if a.cfg.ApplyLocal == nil {
		WriteError(ctx, &statusError{http.StatusNotFound, "not_found_error", "this replica takes no forwarded writes"})
		return
	}
	if len(ctx.PostBody()) > MaxBody {
		WriteError(ctx, &statusError{http.StatusRequestEntityTooLarge, "invalid_request_error",
			fmt.Sprintf("body of %d bytes exceeds %d", len(ctx.PostBody()), MaxBody)})
		return
	}
	cmd, err := store.Decode(ctx.PostBody())
	if err != nil {
		WriteError(ctx, err)
		return
	}
	apply, cancel := context.WithTimeout(context.Background(), a.cfg.ApplyTimeout)
	defer cancel()
	res, err := a.cfg.ApplyLocal(apply, cmd)
	if err != nil {
		WriteError(ctx, err)
		return
	}
	WriteJSON(ctx, http.StatusOK, raftnode.AppliedResult{ID: res.ID, Created: res.Created, Index: res.Index})
}

// The vllm-router compatible endpoints answer as vllm-router does: plain
// text for add and remove (removing an unknown URL succeeds, adding a known
// one is a 400 "already exists"), {"urls": [...]} for the listing.

func (a *Admin) flushCache(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	if a.cfg.FlushCache == nil {
		WriteError(ctx, &statusError{http.StatusNotFound, "not_found_error", "this replica flushes no cache"})
		return
	}
	a.cfg.FlushCache(ctx)
}

func (a *Admin) legacyAddWorker(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	url, ok := queryURL(ctx)
	if !ok {
		return
	}
	if _, exists := a.cfg.Registry().WorkerByURL(url); exists {
		writeText(ctx, http.StatusBadRequest, fmt.Sprintf("Worker %s already exists", url))
		return
	}
	if err := a.allowWorker(url); err != nil {
		writeText(ctx, http.StatusBadRequest, err.Error())
		return
	}
	if _, err := a.apply(store.NewAddWorker(store.AddWorker{URL: url})); err != nil {
		status, _ := ErrorStatus(err)
		writeText(ctx, status, err.Error())
		return
	}
	writeText(ctx, http.StatusOK, "Successfully added worker: "+url)
}

func (a *Admin) legacyRemoveWorker(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	url, ok := queryURL(ctx)
	if !ok {
		return
	}
	if w, exists := a.cfg.Registry().WorkerByURL(url); exists {
		_, err := a.apply(store.NewRemoveWorker(w.ID))
		if err != nil && !errors.Is(err, store.ErrUnknownWorker) {
			status, _ := ErrorStatus(err)
			writeText(ctx, status, err.Error())
			return
		}
	}
	writeText(ctx, http.StatusOK, "Successfully removed worker: "+url)
}

// queryURL returns the url query parameter, or answers 400 itself.
func queryURL(ctx *fasthttp.RequestCtx) (string, bool) {
	url := string(ctx.QueryArgs().Peek("url"))
	if url == "" {
		writeText(ctx, http.StatusBadRequest, "missing query parameter: url")
		return "", false
	}
	return url, true
}

func (a *Admin) legacyListWorkers(ctx *fasthttp.RequestCtx, _ store.WorkerID) {
	workers := a.cfg.Registry().Workers()
	urls := make([]string, len(workers))
	for i, w := range workers {
		urls[i] = w.URL
	}
	WriteJSON(ctx, http.StatusOK, map[string][]string{"urls": urls})
}

// statusError is an error the admin API answers with a fixed status.
type statusError struct {
	status int
	typ    string
	msg    string
}

func (e *statusError) Error() string { return e.msg }

// Refusal is an error answered with status and the OpenAI error type typ,
// as WriteError answers it.
func Refusal(status int, typ, msg string) error { return &statusError{status, typ, msg} }

// ErrorStatus maps an error to its HTTP status and OpenAI error type. It is
// the one place that decides statuses for the admin API.
func ErrorStatus(err error) (int, string) {
	var se *statusError
	var fe *raftnode.ForwardedError
	var nle *raftnode.NotLeaderError
	switch {
	case errors.As(err, &se):
		return se.status, se.typ
	case errors.As(err, &fe):
		return fe.HTTPStatus(), fe.ErrorType()
	case errors.Is(err, store.ErrInvalid):
		return http.StatusBadRequest, "invalid_request_error"
	case errors.Is(err, store.ErrUnknownWorker):
		return http.StatusNotFound, "not_found_error"
	case errors.Is(err, store.ErrConflict):
		return http.StatusConflict, "conflict_error"
	case errors.Is(err, raftnode.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "timeout_error"
	case errors.As(err, &nle), errors.Is(err, raftnode.ErrNoLeader), errors.Is(err, raftnode.ErrClosed),
		errors.Is(err, raftnode.ErrLeaderUnreachable):
		return http.StatusServiceUnavailable, "service_unavailable_error"
	}
	return http.StatusInternalServerError, "server_error"
}

// ErrorMessage explains err to an operator. A leader's answer relayed by a
// follower was explained by the leader already.
func ErrorMessage(status int, err error) string {
	var fe *raftnode.ForwardedError
	if errors.As(err, &fe) {
		return err.Error()
	}
	switch status {
	case http.StatusServiceUnavailable:
		return "no leader reachable: registry writes need the raft leader and this replica cannot reach one; retry shortly: " + err.Error()
	case http.StatusGatewayTimeout:
		return "the registry write did not commit in time (it may still apply): " + err.Error()
	}
	return err.Error()
}

// WriteError answers with an OpenAI-style error body.
func WriteError(ctx *fasthttp.RequestCtx, err error) {
	status, typ := ErrorStatus(err)
	if status == http.StatusServiceUnavailable {
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, "1")
	}
	WriteJSON(ctx, status, adminapi.ErrorBody{Error: adminapi.ErrorDetail{Message: ErrorMessage(status, err), Type: typ, Code: status}})
}

func WriteJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"message":"encode response","type":"server_error","code":500}}`)
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

func writeText(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString(msg)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
