// Command ssebench measures a proxy's relay of a Server-Sent Events stream.
//
//	ssebench serve --addr 127.0.0.1:9000 --events 1000
//	ssebench drive --url http://127.0.0.1:8080/v1/chat/completions --streams 32 --duration 5s
//
// serve is an upstream that answers every request with a stream of events
// written one by one as fast as it can, each its own chunk and its own
// write, each stamped with the time it was written. drive opens streams
// through the proxy, back to back on each of --streams connections, and
// prints one JSON line: events per second over all streams, and, per event,
// the delivery latency (from the upstream's write to the client's read) and
// the gap since the previous event of its stream. Both ends run on this
// host, so their clocks agree.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ssebench serve|drive [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var err error
	switch os.Args[1] {
	case "serve":
		addr := fs.String("addr", "127.0.0.1:0", "loopback host:port to listen on")
		events := fs.Int("events", 1000, "events per stream")
		_ = fs.Parse(os.Args[2:])
		err = serve(*addr, *events)
	case "drive":
		url := fs.String("url", "", "URL of a chat completions endpoint (through the proxy or direct)")
		streams := fs.Int("streams", 1, "concurrent streams, one connection each")
		duration := fs.Duration("duration", 5*time.Second, "how long to open new streams")
		_ = fs.Parse(os.Args[2:])
		err = drive(*url, *streams, *duration)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ssebench:", err)
		os.Exit(1)
	}
}
