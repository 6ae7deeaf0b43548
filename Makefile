# rangealloc — build, test and run targets. `make help` lists them.
GO        ?= go
BIN       ?= bin/rangealloc
PKGS      ?= ./...
FUZZTIME  ?= 30s
BENCHTIME ?= 1s
BENCH     ?= .
# VERSION names the release a build reports (rangealloc version); empty
# leaves it to the VCS revision Go stamps into the binary.
VERSION   ?=
LDFLAGS   := $(if $(VERSION),-X github.com/rangealloc/rangealloc/version.Version=$(VERSION))

.PHONY: help build run cluster test lint bench fuzz jepsen jepsen-ci mutate clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

build: ## build bin/rangealloc
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rangealloc

run: build ## one node with the default pools, data under ./data
	@echo "rangealloc: HTTP API on http://127.0.0.1:7080, data in ./data. In another shell, try:"
	@echo "  $(BIN) allocate clusterip-ipv4 --owner default/web"
	@echo "  curl -s -XPOST -H 'Content-Type: application/json' -d '{\"owner\":\"default/db\"}' http://127.0.0.1:7080/v1/pools/nodeport/allocations"
	@echo "  $(BIN) pools"
	$(BIN) server --data-dir ./data

cluster: build ## three local nodes on 127.0.0.1:7080/7082/7084 until Ctrl-C
	BIN=$(BIN) scripts/cluster.sh

lint: ## gofmt check, go vet, and every mutation of `make mutate` still applies to the code it names
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	@out=$$(scripts/mutate.sh -n 2>&1) || { echo "$$out" | grep -E '^== ' | grep -v 'matched 1 time'; \
	  echo "these mutations no longer apply to the code they name: mend their rows in scripts/mutate.sh"; exit 1; }

# A machine without root, iptables or iproute2 skips the partition suite
# (test/jepsen), which CI runs (CI=true fails instead); the suite names why
# in JEPSEN_SKIPPED, and the run ends by saying so.
JEPSEN_SKIPPED := $(abspath bin/.jepsen-skipped)

test: lint ## lint, then every test (seed corpora of the fuzz targets included) under the race detector
	@mkdir -p $(dir $(JEPSEN_SKIPPED)) && rm -f $(JEPSEN_SKIPPED)
	RANGEALLOC_JEPSEN_SKIPPED=$(JEPSEN_SKIPPED) $(GO) test -race -count=1 -timeout 15m $(PKGS)
	@if [ -f $(JEPSEN_SKIPPED) ]; then \
	  echo "NOTE: test/jepsen (the partition suite, which CI runs) was SKIPPED: $$(cat $(JEPSEN_SKIPPED)); run make test as root"; fi

bench: ## run the benchmarks (BENCH=regexp, BENCHTIME=1s)
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $(BENCHTIME) $(PKGS)

fuzz: ## run every fuzz target for FUZZTIME each
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

jepsen: build ## one Jepsen-style partition run, as root: SEED= DURATION=30s NEMESIS=all ARTIFACTS=dir (docs/TESTING.md)
	$(GO) test ./test/jepsen/ -run '^TestJepsen$$' -v -count=1 -timeout 30m -jepsen.bin=$(abspath $(BIN)) -jepsen.keep \
	  -jepsen.seed=$(or $(SEED),$(shell date +%s)) -jepsen.duration=$(or $(DURATION),30s) -jepsen.nemesis=$(or $(NEMESIS),all) \
	  $(if $(ARTIFACTS),-jepsen.artifacts=$(abspath $(ARTIFACTS)))

# make test runs the partition suite's seeds 1 (every fault) and 4 (the
# Service workload); CI then runs the longer rest of its fixed seeds here.
jepsen-ci: ## the partition suite's other CI seeds, as root: 2 and 3, and 5 on the wal log store (docs/TESTING.md)
	@mkdir -p $(dir $(JEPSEN_SKIPPED)) && rm -f $(JEPSEN_SKIPPED)
	RANGEALLOC_JEPSEN_SKIPPED=$(JEPSEN_SKIPPED) $(GO) test -race -count=1 -timeout 20m ./test/jepsen/ -run '^TestJepsen$$' \
	  -jepsen.seeds=2,3 -jepsen.services-seeds= -jepsen.wal-seeds=5
	@if [ -f $(JEPSEN_SKIPPED) ]; then \
	  echo "NOTE: the partition suite was SKIPPED: $$(cat $(JEPSEN_SKIPPED)); run make jepsen-ci as root"; fi

mutate: ## break the code on purpose, one known-dangerous edit at a time, and prove the tests catch each (NAMES= to pick; docs/TESTING.md)
	scripts/mutate.sh $(NAMES)

clean: ## remove build output (not ./data)
	rm -rf bin
