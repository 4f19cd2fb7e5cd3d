package edge

import "testing"

func TestBodyBuffersComeInPowerOfTwoSizes(t *testing.T) {
	for _, c := range []struct{ n, size int }{{1, 4 << 10}, {4 << 10, 4 << 10}, {4<<10 + 1, 8 << 10},
		{64 << 10, 64 << 10}, {100 << 10, 128 << 10}, {1 << 20, 1 << 20}} {
		b, h := TakeBody(c.n)
		if len(b) != c.n || cap(b) != c.size || h == nil || cap(*h) != c.size {
			t.Fatalf("%d bytes: len %d, cap %d, pooled %v; want a pooled buffer of %d", c.n, len(b), cap(b), h != nil, c.size)
		}
		GiveBody(h)
	}
	if b, h := TakeBody(1<<20 + 1); len(b) != 1<<20+1 || h != nil {
		t.Fatalf("a body past 1 MiB: len %d, pooled %v; want its own buffer", len(b), h != nil)
	}
}
