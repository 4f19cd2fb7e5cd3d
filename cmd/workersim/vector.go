package main

import (
	"bytes"
	"math"

	"github.com/zeebo/xxh3"
)

// embedInput is one input of /v1/embeddings: the text the engine prefills, and whether it came as
// token ids (appendTokenIDs' encoding) rather than text.
type embedInput struct {
	text   []byte
	tokens bool
}

// embed returns the simulated model's unit vector of dims coordinates for in. It is feature
// hashing: every feature (a word of text, lowercased, or a token id) adds +1 or -1 to the
// coordinate its hash picks, and the sum is normalised. Equal inputs get equal vectors and inputs
// sharing words point the same way, so tests can compare them and rerank scores mean something.
// width is the number of bytes one token id takes in in.text.
func embed(in embedInput, dims, width int) []float32 {
	sum := make([]float64, dims)
	add := func(feature []byte) {
		h := xxh3.Hash(feature)
		sign := 1.0
		if h>>63 == 1 {
			sign = -1
		}
		sum[h%uint64(dims)] += sign
	}
	if in.tokens {
		for off := 0; off+width <= len(in.text); off += width {
			add(in.text[off : off+width])
		}
	} else {
		for _, word := range bytes.Fields(in.text) {
			add(bytes.ToLower(word))
		}
	}
	return normalise(sum)
}

// normalise scales v to unit length; the zero vector (no features) becomes the first basis
// vector, so every input has a direction.
func normalise(v []float64) []float32 {
	norm := 0.0
	for _, x := range v {
		norm += x * x
	}
	out := make([]float32, len(v))
	if norm == 0 {
		out[0] = 1
		return out
	}
	norm = math.Sqrt(norm)
	for i, x := range v {
		out[i] = float32(x / norm)
	}
	return out
}

// relevance is the rerank score of a document for a query: their vectors' cosine mapped from
// -1..1 onto 0..1.
func relevance(query, doc []float32) float64 {
	dot := 0.0
	for i := range query {
		dot += float64(query[i]) * float64(doc[i])
	}
	return min(max((1+dot)/2, 0), 1)
}
