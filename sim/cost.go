package sim

import "time"

// PrefillCost is the time a step spends computing newTokens uncached prompt tokens, before the
// slowdown factor: PrefillQuadMs*T^2 + PrefillLinearMs*T + PrefillBaseMs, or zero for no tokens.
func (c Config) PrefillCost(newTokens int) time.Duration {
	if newTokens <= 0 {
		return 0
	}
	t := float64(newTokens)
	return millis(c.PrefillQuadMs*t*t + c.PrefillLinearMs*t + c.PrefillBaseMs)
}

// DecodeCost is the time a step spends decoding with the KV cache kvUsage full (0..1), before the
// slowdown factor. The cost of a decode step hardly depends on the batch size; it grows with the
// KV the attention reads.
func (c Config) DecodeCost(kvUsage float64) time.Duration {
	kvUsage = min(max(kvUsage, 0), 1)
	return millis(c.DecodeEmptyMs + (c.DecodeFullMs-c.DecodeEmptyMs)*kvUsage)
}

// TransferCost is the time to receive tokens of KV from a remote prefill engine.
func (c Config) TransferCost(tokens int) time.Duration {
	return millis(c.TransferMsPerToken * float64(max(tokens, 0)))
}

func millis(ms float64) time.Duration {
	return time.Duration(ms * float64(time.Millisecond))
}
