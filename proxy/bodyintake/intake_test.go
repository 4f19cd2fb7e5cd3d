package bodyintake

import (
	"slices"
	"testing"
)

// A body's buffer, which is what it is charged, starts at 16 KiB and
// doubles as the body arrives; a body of known length takes its whole
// length once its first MiB arrived (or once its length is that near), a
// body of no length goes on doubling up to one byte past the largest body.
func TestABodysBufferGrowsWithWhatArrived(t *testing.T) {
	for _, tc := range []struct {
		want int
		max  int
		caps []int
	}{
		{want: 2000, max: 1 << 30, caps: []int{2000}},
		{want: 40 << 10, max: 1 << 30, caps: []int{16 << 10, 32 << 10, 40 << 10}},
		{want: 5 << 20, max: 1 << 30, caps: []int{16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 5 << 20}},
		{want: -1, max: 3 << 20, caps: []int{16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 3<<20 + 1}},
	} {
		in := Intake{want: tc.want, max: tc.max}
		var caps []int
		for size := in.nextSize(0); ; size = in.nextSize(size) {
			caps = append(caps, size)
			if size == in.target() {
				break
			}
		}
		if !slices.Equal(caps, tc.caps) {
			t.Errorf("a body of length %d: buffers %v, want %v", tc.want, caps, tc.caps)
		}
	}
}
