// Command nrequests sends exactly --n POSTs of a body to a proxy over
// --c keep-alive connections and exits, failing on any answer but a 200:
// the fixed load of instr.sh, whose counts are per request.
//
//	nrequests --addr 127.0.0.1:8080 --n 2000 --c 8 --body body.json
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

func main() {
	addr := flag.String("addr", "", "host:port of the proxy")
	n := flag.Int64("n", 1000, "requests to send, in all")
	conns := flag.Int("c", 8, "connections, each sending one request at a time")
	path := flag.String("path", "/v1/chat/completions", "request path")
	bodyFile := flag.String("body", "", "file whose content is every request's body")
	flag.Parse()
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		log.Fatal(err)
	}
	var left atomic.Int64
	left.Store(*n)
	errs := make(chan error, *conns)
	var wg sync.WaitGroup
	for range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- send(*addr, *path, body, &left)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			log.Fatal(err)
		}
	}
}

// send sends requests on one connection until left runs out.
func send(addr, path string, body []byte, left *atomic.Int64) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	br, bw := bufio.NewReaderSize(conn, 64<<10), bufio.NewWriterSize(conn, 64<<10)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	req.Header.SetMethod("POST")
	req.SetRequestURI(path)
	req.Header.SetHost(addr)
	req.Header.SetContentType("application/json")
	req.SetBodyRaw(body)
	for left.Add(-1) >= 0 {
		if err := req.Write(bw); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		if err := resp.Read(br); err != nil {
			return err
		}
		if resp.StatusCode() != fasthttp.StatusOK {
			return fmt.Errorf("status %d: %s", resp.StatusCode(), resp.Body())
		}
	}
	return nil
}
