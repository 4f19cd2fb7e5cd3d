package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/urfave/cli/v2"
	"k8s.io/utils/clock"
)

// shutdownGrace bounds how long a stopping worker waits for its connections to close.
const shutdownGrace = 5 * time.Second

func main() {
	metrics.ExposeMetadata(true) // # HELP and # TYPE lines, as vLLM serves them
	app := newApp(os.Stdout, os.Stderr, func(c *cli.Context, cfg serverConfig) error {
		ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return run(ctx, cfg, os.Stdout, os.Exit)
	})
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "workersim:", err)
		os.Exit(2)
	}
}

// run serves cfg until ctx ends. Its first line on stdout is "listening on HOST:PORT".
func run(ctx context.Context, cfg serverConfig, stdout io.Writer, exit func(int)) error {
	ln, err := net.Listen("tcp", cfg.address())
	if err != nil {
		return fmt.Errorf("listen on %s (--host, --port): %w", cfg.address(), err)
	}
	fmt.Fprintf(stdout, "listening on %s\n", ln.Addr())
	s, err := newServer(cfg, ln.Addr(), clock.RealClock{}, exit)
	if err != nil {
		ln.Close()
		return err
	}
	switch {
	case s.kv != nil && cfg.kvEventsConnect:
		fmt.Fprintf(stdout, "publishing KV events to %s (dialed), replay on %s\n", cfg.kvEvents, s.kv.pub.ReplayEndpoint())
	case s.kv != nil:
		fmt.Fprintf(stdout, "publishing KV events on %s, replay on %s\n", s.kv.pub.Endpoint(), s.kv.pub.ReplayEndpoint())
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if serr := s.Shutdown(shutdownCtx); serr != nil && err == nil {
		err = serr
	}
	// Shutdown closes only a listener Serve has taken up; one stopped right after start may be
	// before that, and Serve would then accept forever. Closing it here ends Serve either way.
	_ = ln.Close()
	if ctx.Err() != nil {
		<-served
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
