package zmtp

import (
	"encoding/binary"
	"strings"
)

// A command's body is its name (a length byte, then the name) and its data;
// READY's data is properties, each a name (a length byte, then the name)
// and a value (4 bytes of length, big-endian, then the value).

func appendCommand(dst []byte, name string, data []byte) []byte {
	body := make([]byte, 0, 1+len(name)+len(data))
	body = append(body, byte(len(name)))
	body = append(body, name...)
	body = append(body, data...)
	return appendFrame(dst, flagCommand, body)
}

// ready is the body of this side's READY: its socket type.
func ready(socketType string) []byte {
	var data []byte
	data = append(data, byte(len("Socket-Type")))
	data = append(data, "Socket-Type"...)
	data = binary.BigEndian.AppendUint32(data, uint32(len(socketType)))
	data = append(data, socketType...)
	return data
}

// parseCommand splits a command frame into its name and data.
func parseCommand(frame []byte) (name string, data []byte, err error) {
	if len(frame) < 1 || int(frame[0]) > len(frame)-1 {
		return "", nil, protocolErr("a command frame of %d bytes has no name", len(frame))
	}
	n := int(frame[0])
	return string(frame[1 : 1+n]), frame[1+n:], nil
}

// socketType is the Socket-Type property of a READY's data (property names
// are case-insensitive).
func socketType(data []byte) (string, error) {
	for len(data) > 0 {
		n := int(data[0])
		if len(data) < 1+n+4 {
			return "", protocolErr("a READY property cut short")
		}
		name := string(data[1 : 1+n])
		data = data[1+n:]
		size := binary.BigEndian.Uint32(data)
		data = data[4:]
		if uint64(size) > uint64(len(data)) {
			return "", protocolErr("a READY property value cut short")
		}
		if strings.EqualFold(name, "Socket-Type") {
			return string(data[:size]), nil
		}
		data = data[size:]
	}
	return "", protocolErr("READY without a Socket-Type")
}
