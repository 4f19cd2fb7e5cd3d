package store

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/zeebo/xxh3"
)

// RoutingConfig is the routing configuration every replica shares: the Raft
// log holds the cluster's copy, every replica routes with it, and the
// routing flags only seed a registry that has none (replicas that judged
// overload with different thresholds would disagree about loads and
// owners). A replica hashes with its own --block-size, so one whose block
// size differs from the cluster's is refused. The zero value is "not
// configured".
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
	// HotPrefixLoad and HotPrefixOwners spread a hot prefix over more
	// owners (--hot-prefix-load, --hot-prefix-owners). A config written
	// before they existed has both zero: spreading off.
	HotPrefixLoad   float64 `json:"hot_prefix_load,omitempty"`
	HotPrefixOwners int     `json:"hot_prefix_owners,omitempty"`
	// Prefill and Decode, when set, route the roles of prefill/decode
	// disaggregation; nil leaves a role to its replica's flags.
	Prefill *RoleRouting `json:"prefill,omitempty"`
	Decode  *RoleRouting `json:"decode,omitempty"`
}

// RoleRouting is the routing of one role under prefill/decode
// disaggregation; the fields mean what RoutingConfig's do.
type RoleRouting struct {
	Policy              string  `json:"policy"`
	MissPlacement       string  `json:"miss_placement"`
	CacheThreshold      float64 `json:"cache_threshold"`
	BalanceAbsThreshold float64 `json:"balance_abs_threshold"`
	BalanceRelThreshold float64 `json:"balance_rel_threshold"`
}

func (r *RoleRouting) text() string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("%q/%q/%s/%s/%s", r.Policy, r.MissPlacement, formatFloat(r.CacheThreshold),
		formatFloat(r.BalanceAbsThreshold), formatFloat(r.BalanceRelThreshold))
}

// clone copies c so that it shares no role settings with the original.
func (c RoutingConfig) clone() RoutingConfig {
	for _, role := range []**RoleRouting{&c.Prefill, &c.Decode} {
		if *role != nil {
			r := **role
			*role = &r
		}
	}
	return c
}

// maxBlockSize bounds BlockSize to something a prompt could plausibly fill.
const maxBlockSize = 1 << 20

// MaxHotPrefixOwners bounds HotPrefixOwners: a prefix spread wider is no
// longer an affinity.
const MaxHotPrefixOwners = 64

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
		// The roles come last and only when set, so the fingerprint of a
		// config without them is the one earlier versions computed.
		{"prefill", c.Prefill.text()},
		{"decode", c.Decode.text()},
		// Unset (zero) like the roles, for the same reason.
		{"hot_prefix_load", noneIfZero(formatFloat(c.HotPrefixLoad))},
		{"hot_prefix_owners", noneIfZero(strconv.Itoa(c.HotPrefixOwners))},
	}
}

// noneIfZero is a field's text, "none" (left out of the fingerprint) for 0.
func noneIfZero(v string) string {
	if v == "0" {
		return "none"
	}
	return v
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Fingerprint is a short stable digest of the configuration (16 hex digits),
// cheap to carry in gossip metadata: equal configurations have equal
// fingerprints on every replica and every version that keeps this field set.
func (c RoutingConfig) Fingerprint() string {
	var b strings.Builder
	for _, f := range c.fields() {
		if f.value == "none" {
			continue
		}
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
	if bad(c.HotPrefixLoad) || c.HotPrefixLoad < 0 {
		return fieldError("config.hot_prefix_load", "%v must be >= 0", c.HotPrefixLoad)
	}
	if c.HotPrefixOwners < 0 || c.HotPrefixOwners > MaxHotPrefixOwners {
		return fieldError("config.hot_prefix_owners", "%d is not in 0..%d", c.HotPrefixOwners, MaxHotPrefixOwners)
	}
	for name, r := range map[string]*RoleRouting{"prefill": c.Prefill, "decode": c.Decode} {
		if err := r.validate("config." + name); err != nil {
			return err
		}
	}
	return nil
}

func (r *RoleRouting) validate(prefix string) error {
	switch {
	case r == nil:
		return nil
	case len(r.Policy) > maxNameBytes:
		return fieldError(prefix+".policy", "longer than %d bytes", maxNameBytes)
	case len(r.MissPlacement) > maxNameBytes:
		return fieldError(prefix+".miss_placement", "longer than %d bytes", maxNameBytes)
	case bad(r.CacheThreshold) || r.CacheThreshold < 0 || r.CacheThreshold > 1:
		return fieldError(prefix+".cache_threshold", "%v is not in [0, 1]", r.CacheThreshold)
	case bad(r.BalanceAbsThreshold) || r.BalanceAbsThreshold < 0:
		return fieldError(prefix+".balance_abs_threshold", "%v must be >= 0", r.BalanceAbsThreshold)
	case bad(r.BalanceRelThreshold) || r.BalanceRelThreshold < 0:
		return fieldError(prefix+".balance_rel_threshold", "%v must be >= 0", r.BalanceRelThreshold)
	}
	return nil
}

func bad(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }
