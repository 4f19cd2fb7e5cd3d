package store

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/zeebo/xxh3"
)

// RoutingConfig is the routing configuration every replica must share:
// replicas that hash prompts with different block sizes, or judge overload
// with different thresholds, would disagree about owners and loads. The Raft
// log holds the cluster's copy; a replica whose flags differ is refused at
// join (see Diff). The zero value is "not configured".
type RoutingConfig struct {
	// BlockSize is the prefix-hash block size in bytes (--block-size).
	BlockSize int `json:"block_size"`
	// Policy is the routing policy name (--policy).
	Policy string `json:"policy"`
	// MissPlacement is the miss placement strategy (--miss-placement).
	MissPlacement string `json:"miss_placement"`
	// CacheThreshold is the match rate a hit must exceed, in [0, 1].
	CacheThreshold float64 `json:"cache_threshold"`
	// BalanceAbsThreshold is the absolute overload margin, in requests.
	BalanceAbsThreshold float64 `json:"balance_abs_threshold"`
	// BalanceRelThreshold is the relative overload factor (load > min * rel).
	BalanceRelThreshold float64 `json:"balance_rel_threshold"`
}

// maxBlockSize bounds BlockSize to something a prompt could plausibly fill.
const maxBlockSize = 1 << 20

// maxNameBytes bounds the policy and miss placement names.
const maxNameBytes = 64

// configField is one field of RoutingConfig as text, in declaration order.
type configField struct{ name, value string }

func (c RoutingConfig) fields() []configField {
	return []configField{
		{"block_size", strconv.Itoa(c.BlockSize)},
		{"policy", strconv.Quote(c.Policy)},
		{"miss_placement", strconv.Quote(c.MissPlacement)},
		{"cache_threshold", formatFloat(c.CacheThreshold)},
		{"balance_abs_threshold", formatFloat(c.BalanceAbsThreshold)},
		{"balance_rel_threshold", formatFloat(c.BalanceRelThreshold)},
	}
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Fingerprint is a short stable digest of the configuration (16 hex digits),
// cheap to carry in gossip metadata: equal configurations have equal
// fingerprints on every replica and every version that keeps this field set.
func (c RoutingConfig) Fingerprint() string {
	var b strings.Builder
	for _, f := range c.fields() {
		b.WriteString(f.name)
		b.WriteByte('=')
		b.WriteString(f.value)
		b.WriteByte(';')
	}
	return fmt.Sprintf("%016x", xxh3.HashString(b.String()))
}

// Diff returns nil when c and other are equal, and otherwise a
// *ConfigMismatchError naming the first differing field, c's value as Local
// and other's as Remote.
func (c RoutingConfig) Diff(other RoutingConfig) error {
	mine, theirs := c.fields(), other.fields()
	for i := range mine {
		if mine[i].value != theirs[i].value {
			return &ConfigMismatchError{Field: mine[i].name, Local: mine[i].value, Remote: theirs[i].value}
		}
	}
	return nil
}

// Validate checks the ranges every policy relies on. Policy names are not
// checked here: the routing packages own that list and check it at start.
func (c RoutingConfig) Validate() error {
	if c.BlockSize < 1 || c.BlockSize > maxBlockSize {
		return fieldError("config.block_size", "%d is not in 1..%d", c.BlockSize, maxBlockSize)
	}
	if len(c.Policy) > maxNameBytes {
		return fieldError("config.policy", "longer than %d bytes", maxNameBytes)
	}
	if len(c.MissPlacement) > maxNameBytes {
		return fieldError("config.miss_placement", "longer than %d bytes", maxNameBytes)
	}
	if bad(c.CacheThreshold) || c.CacheThreshold < 0 || c.CacheThreshold > 1 {
		return fieldError("config.cache_threshold", "%v is not in [0, 1]", c.CacheThreshold)
	}
	if bad(c.BalanceAbsThreshold) || c.BalanceAbsThreshold < 0 {
		return fieldError("config.balance_abs_threshold", "%v must be >= 0", c.BalanceAbsThreshold)
	}
	if bad(c.BalanceRelThreshold) || c.BalanceRelThreshold < 0 {
		return fieldError("config.balance_rel_threshold", "%v must be >= 0", c.BalanceRelThreshold)
	}
	return nil
}

func bad(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }
