package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// defaultSamplingRatio is --otel-sampling-ratio's default, vllm-router's:
// every new trace is sampled.
const defaultSamplingRatio = 1.0

// tracerFrom builds the tracer of --enable-trace / --otlp-traces-endpoint:
// spans batched and sent by OTLP over HTTP, sampled by --otel-sampling-ratio
// (a client's sampled traceparent is followed). Without either flag it
// returns no tracer. shutdown flushes what is left.
func tracerFrom(c *cli.Context, node string) (tracer trace.Tracer, shutdown func(context.Context) error, err error) {
	endpoint := c.String("otlp-traces-endpoint")
	if !c.Bool("enable-trace") && endpoint == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	ratio := c.Float64("otel-sampling-ratio")
	if ratio < 0 || ratio > 1 {
		return nil, nil, fmt.Errorf("--otel-sampling-ratio: %v is not between 0 and 1", ratio)
	}
	var opts []otlptracehttp.Option
	switch {
	case strings.HasPrefix(endpoint, "http://") || strings.HasPrefix(endpoint, "https://"):
		opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
	case endpoint != "":
		opts = append(opts, otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure())
	}
	exporter, err := otlptracehttp.New(context.Background(), opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("--otlp-traces-endpoint: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "kvrouter"), attribute.String("service.instance.id", node))
	provider := sdktrace.NewTracerProvider(sdktrace.WithResource(res),
		sdktrace.WithBatcher(exporter, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))))
	return provider.Tracer("kvrouter"), provider.Shutdown, nil
}
