package zmtp

import (
	"bufio"
	"encoding/binary"
	"io"
)

// Frame flags (RFC 23): MORE says another frame of the message follows,
// LONG that the size takes 8 bytes rather than 1, COMMAND that the frame is
// a command rather than part of a message.
const (
	flagMore    byte = 0x01
	flagLong    byte = 0x02
	flagCommand byte = 0x04
)

// readChunk is how much of a frame's body is read before more memory is
// given to it: a body grows with the bytes that arrived, never to the size
// its header announced before they did.
const readChunk = 64 << 10

// frameReader reads frames within its limits.
type frameReader struct {
	r      *bufio.Reader
	limits Limits
}

// header reads a frame's flags and size.
func (f *frameReader) header() (flags byte, size uint64, err error) {
	if flags, err = f.r.ReadByte(); err != nil {
		return 0, 0, err
	}
	if flags&^(flagMore|flagLong|flagCommand) != 0 {
		return 0, 0, protocolErr("frame flags %#x", flags)
	}
	if flags&flagLong == 0 {
		b, err := f.r.ReadByte()
		return flags, uint64(b), err
	}
	var long [8]byte
	if _, err = io.ReadFull(f.r, long[:]); err != nil {
		return 0, 0, err
	}
	return flags, binary.BigEndian.Uint64(long[:]), nil
}

// body reads size bytes, growing its buffer as they arrive.
func (f *frameReader) body(size int) ([]byte, error) {
	b := make([]byte, 0, min(size, readChunk))
	for len(b) < size {
		n := min(size-len(b), readChunk)
		if cap(b)-len(b) < n {
			b = append(b, make([]byte, n)...)[:len(b)]
		}
		if _, err := io.ReadFull(f.r, b[len(b):len(b)+n]); err != nil {
			return nil, err
		}
		b = b[:len(b)+n]
	}
	return b, nil
}

// next reads one command or one whole message. A command is one frame
// (MORE is not allowed on it) of at most maxCommandBytes; a message's
// frames together stay within MaxMessageBytes and number at most MaxFrames.
func (f *frameReader) next() (frames [][]byte, command bool, err error) {
	total := 0
	for {
		flags, size, err := f.header()
		if err != nil {
			return nil, false, err
		}
		isCommand := flags&flagCommand != 0
		switch {
		case isCommand && (len(frames) > 0 || flags&flagMore != 0):
			return nil, false, protocolErr("a command inside a message")
		case isCommand && size > maxCommandBytes:
			return nil, false, tooLarge("a command of %d bytes, over %d", size, maxCommandBytes)
		case size > uint64(f.limits.MaxMessageBytes-total):
			return nil, false, tooLarge("a message of over %d bytes", f.limits.MaxMessageBytes)
		case len(frames) == f.limits.MaxFrames:
			return nil, false, tooLarge("a message of over %d frames", f.limits.MaxFrames)
		}
		b, err := f.body(int(size))
		if err != nil {
			return nil, false, err
		}
		frames, total = append(frames, b), total+int(size)
		if isCommand || flags&flagMore == 0 {
			return frames, isCommand, nil
		}
	}
}

// appendFrame appends one frame of body with flags, short or long by size.
func appendFrame(dst []byte, flags byte, body []byte) []byte {
	if len(body) > 255 {
		dst = append(dst, flags|flagLong)
		dst = binary.BigEndian.AppendUint64(dst, uint64(len(body)))
	} else {
		dst = append(dst, flags, byte(len(body)))
	}
	return append(dst, body...)
}

// appendMessage appends the frames of one message.
func appendMessage(dst []byte, frames ...[]byte) []byte {
	for i, f := range frames {
		var flags byte
		if i < len(frames)-1 {
			flags = flagMore
		}
		dst = appendFrame(dst, flags, f)
	}
	return dst
}
