package main

import (
	"github.com/urfave/cli/v2"

	"github.com/kvrouter/kvrouter/cluster"
)

// loraFlags are the flags of routing LoRA adapters' requests.
func loraFlags() []cli.Flag {
	d := cluster.DefaultLoRA()
	return []cli.Flag{
		&cli.BoolFlag{Name: "lora-residency", Value: d.Residency, EnvVars: env("lora-residency"),
			Usage: "send a LoRA adapter's requests where it is resident (the tier's requests of it in flight, the engines' vllm:lora_requests_info), unless that worker is overloaded; a new adapter to a worker whose max_lora slots are not all busy with others; a hot one to more workers, as a hot prefix; every worker's /v1/models asked every --engine-scrape-interval-secs"},
		stringFlag("lora-load-path", d.LoadPath, "load an adapter no worker lists on the worker it would be placed on (vLLM's /v1/load_lora_adapter), from this path, {name} replaced by the adapter's name; empty: such a request is a 404"),
	}
}

// loraFrom reads the LoRA flags into cfg; Validate refuses a bad one.
func loraFrom(c *cli.Context, cfg *cluster.Config) {
	cfg.LoRA = cluster.LoRA{Residency: c.Bool("lora-residency"), LoadPath: c.String("lora-load-path")}
}
