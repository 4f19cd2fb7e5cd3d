# The router tier for LLM inference fleets. `make help` lists the targets.

GO        ?= go
BIN       := bin
VERSION   := $(shell scripts/version.sh)
LDFLAGS   := -s -w -X main.version=$(VERSION)
CMDS      := router workersim loadgen fleetsim
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME  ?= 20s

.PHONY: help build peers run run-pd run-cluster test rules test-short docs lint fuzz bench bench-proxy bench-migration chaos chaos-fleet soak ui-screenshot clean release release-check upgrade

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## static binaries into bin/: router, workersim, loadgen, fleetsim
	@mkdir -p $(BIN)
	@for c in $(CMDS); do \
		if ls cmd/$$c/*.go >/dev/null 2>&1; then CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$$c ./cmd/$$c || exit 1; fi; \
	done

peers: ## build the public engines the tests also run against (llm-d-inference-sim) once into a cache (PEER_CACHE)
	@scripts/peers.sh

run: build ## a router on the embedded default in front of three workersims on loopback
	@scripts/run.sh regular

run-pd: build ## the same with prefill/decode disaggregation: 2 prefill + 2 decode workersims
	@scripts/run.sh pd

run-cluster: build ## three router replicas as one cluster in front of three workersims
	@scripts/run.sh cluster

test: ## go vet, the race-enabled tests of every package, and the alert rules' tests (with promtool)
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...
	@$(MAKE) --no-print-directory rules

upgrade: ## a rolling upgrade and a rollback of three replicas between the previous release (CHANGELOG.md) and this build, under traffic
	KVROUTER_UPGRADE=1 $(GO) test -count=1 -timeout 15m -run '^TestRollingUpgradeAndRollback$$' -v ./cmd/router/

release: ## the release's static binaries and image, reproducibly, into dist/<version>/ (scripts/version.sh names it)
	@scripts/release.sh

release-check: ## build the release twice (the second from an empty build cache) and compare every sha256
	@scripts/release.sh --check

rules: ## promtool check and unit tests of deploy/prometheus/rules.yml (skipped, saying so, without promtool)
	@if command -v promtool >/dev/null 2>&1; then \
		promtool check rules deploy/prometheus/rules.yml && \
		promtool check config deploy/prometheus/prometheus.yml && \
		promtool test rules deploy/prometheus/rules_test.yml; \
	else \
		echo "no promtool: the alert rules' tests are skipped (Debian: apt-get install prometheus)"; \
	fi

docs: ## rewrite docs/configuration.md from the flags of router serve
	$(GO) test ./cmd/router -run TestTheConfigurationReferenceIsTheFlags -update-docs -count=1

lint: ## staticcheck at a pinned version
	$(GO) run $(STATICCHECK) ./...

fuzz: ## run every fuzz target for FUZZTIME each
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

bench: build ## benchmarks: selection cost, fleet simulation tables, the proxy path against nginx and HAProxy; writes BENCHMARKS.md
	@scripts/bench.sh

bench-proxy: build ## only the proxy path against nginx and HAProxy; rewrites its section of BENCHMARKS.md
	@scripts/bench.sh proxy

bench-migration: ## streams that outlive their engine on real processes, 3 rounds (BENCHMARKS.md): a worker killed under load (workersim and llm-d-inference-sim), a drain=migrate of 20 streams, a P/D decode worker killed
	KVROUTER_BENCH_MIGRATION=1 $(GO) test ./cmd/router -run TestBenchMigration -v -count=1 -timeout 20m

chaos: build ## docker-compose chaos scenarios and their invariants
	@scripts/chaos.sh

chaos-fleet: build ## chaos at fleet scale: 8 replicas, 64 workersims; workers removed, a replica SIGKILLed, a worker SIGKILLed mid-stream, a rolling restart, a partition of 3 of 8
	@scripts/chaos-fleet.sh

soak: build ## four replicas for SOAK_MINUTES (60) of agentic traffic, workers replaced, a replica restarted every 10 min; judges growth (scripts/soak.py)
	@exec python3 scripts/soak.py

ui-screenshot: ## docs/ui.png: the status page of three replicas and four workersims under load (needs Chromium)
	KVROUTER_UI_SCREENSHOT=$(CURDIR)/docs/ui.png $(GO) test -count=1 -timeout 10m -run '^TestStatusPageScreenshotForTheREADME$$' -v ./cmd/router

clean: ## remove build output
	rm -rf $(BIN) dist
