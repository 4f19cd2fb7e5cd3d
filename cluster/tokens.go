package cluster

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/affinity"
	"github.com/kvrouter/kvrouter/cluster/admin"
	"github.com/kvrouter/kvrouter/cluster/link"
	"github.com/kvrouter/kvrouter/proxy"
)

// The cluster-port endpoints of the tier's token keepers
// (proxy/tokenize_share.go): POST a query, answer an entry or nothing;
// POST an entry to keep.
const (
	tokensFindPath = "/cluster/tokens/find"
	tokensKeepPath = "/cluster/tokens/keep"
)

// tokenShare is the replica's proxy.TokenShare: the keeper of a worker's
// prompts is the live replica that scores highest for it (rendezvous over
// the members' names, so every replica names the same one while they agree
// on who is alive, and a replica leaving moves only its own workers'
// prompts), reached over the cluster port.
type tokenShare struct {
	gossip *replicaGossip
	rpc    *link.Quick
}

var _ proxy.TokenShare = (*tokenShare)(nil)

// KeeperOf is the cluster port of the keeper of w's prompts, "" when it is
// this replica or there is no other.
func (s *tokenShare) KeeperOf(w affinity.WorkerID) string {
	node := s.gossip.current()
	if node == nil {
		return ""
	}
	var key [4]byte
	binary.LittleEndian.PutUint32(key[:], uint32(w))
	seed := xxh3.Hash(key[:])
	best, bestScore, self, any := "", uint64(0), false, false
	for _, m := range node.Members() {
		if score := xxh3.HashStringSeed(m.Name, seed); !any || score > bestScore {
			best, bestScore, self, any = m.Tags[tagRaft], score, m.Self, true
		}
	}
	if self {
		return ""
	}
	return best
}

func (s *tokenShare) Find(keeper string, query []byte, deadline time.Time) ([]byte, error) {
	return s.post(keeper, tokensFindPath, query, deadline)
}

func (s *tokenShare) Keep(keeper string, entry []byte, deadline time.Time) error {
	_, err := s.post(keeper, tokensKeepPath, entry, deadline)
	return err
}

func (s *tokenShare) post(keeper, path string, body []byte, deadline time.Time) ([]byte, error) {
	status, ans, err := s.rpc.Post(keeper, path, body, deadline)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("the token keeper %s answered %d", keeper, status)
	}
	return ans, nil
}

// serveFindTokens is tokensFindPath: this replica's tokens for a peer's
// query, or an empty answer.
func serveFindTokens(p *proxy.Proxy) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		ans, err := p.FindTokens(c.PostBody())
		if err != nil {
			admin.WriteError(c, admin.Refusal(http.StatusBadRequest, "invalid_request_error", err.Error()))
			return
		}
		c.SetContentType("application/octet-stream")
		c.SetBody(ans)
	}
}

// serveKeepTokens is tokensKeepPath: a peer's prompt's tokens, kept.
func serveKeepTokens(p *proxy.Proxy) fasthttp.RequestHandler {
	return func(c *fasthttp.RequestCtx) {
		if err := p.KeepTokens(c.PostBody()); err != nil {
			admin.WriteError(c, admin.Refusal(http.StatusBadRequest, "invalid_request_error", err.Error()))
		}
	}
}
