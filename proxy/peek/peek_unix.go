//go:build unix

package peek

import "syscall"

// FD peeks one byte of fd without waiting. more reports that nothing is
// there yet, so a caller that wants to wait should wait for readiness.
func FD(fd uintptr) (state State, more bool) {
	var b [1]byte
	for {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			return Empty, true
		case err != nil:
			return Error, false
		case n > 0:
			return Data, false
		}
		return EOF, false
	}
}
