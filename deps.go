//go:build tools

package tools

import (
	_ "github.com/VictoriaMetrics/metrics"
	_ "github.com/anishathalye/porcupine"
	_ "github.com/hashicorp/memberlist"
	_ "github.com/hashicorp/raft"
	_ "github.com/hashicorp/raft-boltdb/v2"
	_ "github.com/urfave/cli/v2"
	_ "github.com/valyala/fasthttp"
	_ "github.com/valyala/fastjson"
	_ "github.com/zeebo/xxh3"
	_ "go.etcd.io/bbolt"
	_ "go.uber.org/goleak"
)
