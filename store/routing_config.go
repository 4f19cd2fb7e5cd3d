package store

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/affinity"
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

// Bounds of BlockSize: below MinBlockSize a block is shorter than a word of
// the text and the index holds a node per few bytes; MaxBlockSize is
// something a prompt could plausibly fill.
const (
	MinBlockSize = 16
	MaxBlockSize = 1 << 20
)

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

// The checks of the routing fields, one per field: the block size's here,
// the thresholds' in affinity (thresholdcheck.go). A stored config
// (Validate) and a replica's flags (cluster.Routing.Validate) are checked
// with the same ones; each caller names the field its own way.

// CheckBlockSize refuses a block size out of MinBlockSize..MaxBlockSize.
func CheckBlockSize(n int) error {
	if n < MinBlockSize || n > MaxBlockSize {
		return fmt.Errorf("%d is not in %d..%d bytes", n, MinBlockSize, MaxBlockSize)
	}
	return nil
}

func checkName(s string) error {
	if len(s) > maxNameBytes {
		return fmt.Errorf("longer than %d bytes", maxNameBytes)
	}
	return nil
}

// fieldCheck is one field of a config and the check of its value.
type fieldCheck struct {
	field string
	err   error
}

// firstBad is the first failed check, as a *FieldError under prefix.
func firstBad(prefix string, checks []fieldCheck) error {
	for _, c := range checks {
		if c.err != nil {
			return &FieldError{Field: prefix + c.field, Problem: c.err.Error()}
		}
	}
	return nil
}

// Validate checks the ranges every policy relies on. Policy names are not
// checked here: the routing packages own that list and check it at start.
func (c RoutingConfig) Validate() error {
	if err := firstBad("config.", []fieldCheck{
		{"block_size", CheckBlockSize(c.BlockSize)},
		{"policy", checkName(c.Policy)},
		{"miss_placement", checkName(c.MissPlacement)},
		{"cache_threshold", affinity.CheckCacheThreshold(c.CacheThreshold)},
		{"balance_abs_threshold", affinity.CheckBalanceAbs(c.BalanceAbsThreshold)},
		{"balance_rel_threshold", affinity.CheckBalanceRel(c.BalanceRelThreshold)},
		{"hot_prefix_load", affinity.CheckHotLoad(c.HotPrefixLoad)},
		{"hot_prefix_owners", affinity.CheckHotOwners(c.HotPrefixOwners)},
	}); err != nil {
		return err
	}
	for name, r := range map[string]*RoleRouting{"prefill": c.Prefill, "decode": c.Decode} {
		if err := r.validate("config." + name + "."); err != nil {
			return err
		}
	}
	return nil
}

func (r *RoleRouting) validate(prefix string) error {
	if r == nil {
		return nil
	}
	return firstBad(prefix, []fieldCheck{
		{"policy", checkName(r.Policy)},
		{"miss_placement", checkName(r.MissPlacement)},
		{"cache_threshold", affinity.CheckCacheThreshold(r.CacheThreshold)},
		{"balance_abs_threshold", affinity.CheckBalanceAbs(r.BalanceAbsThreshold)},
		{"balance_rel_threshold", affinity.CheckBalanceRel(r.BalanceRelThreshold)},
	})
}
