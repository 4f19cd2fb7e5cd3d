//go:build unix

package proxy

import "syscall"

// peekFD peeks one byte of fd without waiting. more reports that nothing is
// there yet, so a caller that wants to wait should wait for readiness.
func peekFD(fd uintptr) (state peekState, more bool) {
	var b [1]byte
	for {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			return peekEmpty, true
		case err != nil:
			return peekError, false
		case n > 0:
			return peekData, false
		}
		return peekEOF, false
	}
}
