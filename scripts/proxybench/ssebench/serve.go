package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// serve answers every inference request on addr with a stream of n events,
// and a health check (GET /health) with a short 200, as an engine does: a
// router's probe reads a bounded body.
func serve(addr string, n int) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String()) // the caller reads the bound address
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go serveConn(c, n)
	}
}

const streamHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n" +
	"Transfer-Encoding: chunked\r\n\r\n"

// serveConn answers the requests of one keep-alive connection.
func serveConn(c net.Conn, n int) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		if req.URL.Path == "/health" {
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"); err != nil {
				return
			}
			continue
		}
		if writeStream(c, n) != nil {
			return
		}
	}
}

// writeStream writes the head and n events, each as one chunk in one
// write, then [DONE] and the terminating chunk.
func writeStream(c net.Conn, n int) error {
	if _, err := io.WriteString(c, streamHead); err != nil {
		return err
	}
	buf := make([]byte, 0, 256)
	for i := range n {
		buf = appendChunk(buf[:0], event(i))
		if _, err := c.Write(buf); err != nil {
			return err
		}
	}
	buf = appendChunk(buf[:0], []byte("data: [DONE]\n\n"))
	_, err := c.Write(append(buf, "0\r\n\r\n"...))
	return err
}

// event is an OpenAI-style chunk stamped with the time it is written, in
// nanoseconds since the epoch.
func event(i int) []byte {
	b := []byte(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","t":`)
	b = strconv.AppendInt(b, time.Now().UnixNano(), 10)
	b = append(b, `,"n":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	return append(b, `,"choices":[{"index":0,"delta":{"content":"tok"}}]}`+"\n\n"...)
}

func appendChunk(dst, data []byte) []byte {
	dst = strconv.AppendInt(dst, int64(len(data)), 16)
	dst = append(dst, "\r\n"...)
	dst = append(dst, data...)
	return append(dst, "\r\n"...)
}
