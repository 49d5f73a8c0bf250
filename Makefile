# explorer-edge. `make run` starts explorer-sim and explorer-edge on the
# shipped config.yaml; Ctrl-C stops both. `make test` is everything CI runs.
GO ?= go
BIN := bin
# The build's name, in -version, explorer_edge_build_info and the start log.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.revision=$(REVISION)
# make image tags the build twice: $(IMAGE_NAME):$(VERSION), the name to push
# and pin (deploy/k8s/kustomization.yaml), and $(IMAGE_NAME):latest, the
# name the docs' `docker run` lines use for the last build made here.
IMAGE_NAME ?= explorer-edge
IMAGE ?= $(IMAGE_NAME):$(VERSION)
# org.opencontainers.image.source: the repository's web address (a registry
# links the image to it). From git's origin when it is an https URL; set
# SOURCE=https://... when origin is ssh or absent.
SOURCE ?= $(shell git remote get-url origin 2>/dev/null | grep '^https://' | sed 's/\.git$$//')

.PHONY: build image run test allocs vet lint prometheusrule bench bench-compare bench-browser bench-replay bench-replay-blocks bench-replay-zipf bench-memory bench-stream path fuzz fuzz-ci soak clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/explorer-edge ./cmd/explorer-sim

# The container image, named and labelled with the same version, and
# tagged latest too.
image:
	docker build -t $(IMAGE) -t $(IMAGE_NAME):latest \
	  --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) --build-arg SOURCE='$(SOURCE)' \
	  --build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) .

run: build
	@trap 'kill $$sim $$edge 2>/dev/null; wait' INT TERM EXIT; \
	$(BIN)/explorer-sim -listen 127.0.0.1:8900 & sim=$$!; \
	$(BIN)/explorer-edge -config config.yaml & edge=$$!; \
	wait $$edge

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...

# staticcheck, pinned; `go run` fetches it through the module proxy (the
# first run takes about a minute, later ones use the module and build caches).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) run $(STATICCHECK) ./...

# The Prometheus Operator's copy of deploy/prometheus/alerts.yaml. Commit
# the result; `make test` fails while it is out of date. RUNBOOK_BASE puts
# your repository's address in front of the runbook links.
RUNBOOK_BASE ?=
prometheusrule:
	$(GO) run ./deploy/cmd/prometheusrule -runbook-base '$(RUNBOOK_BASE)' -o deploy/k8s/prometheusrule.yaml deploy/prometheus/alerts.yaml

test: vet lint build
	$(GO) run ./cmd/explorer-edge -check-config -config config.yaml
	$(GO) test -race -count=1 -timeout 10m ./...
	$(MAKE) --no-print-directory allocs

# Allocation counts mean nothing under -race: every test that counts
# allocations (testing.AllocsPerRun) runs once more without it, in every
# package. The pass fails when a name below ran nothing or did not pass
# (a renamed test would otherwise drop out unseen), and when a test that
# counts allocations is missing from the list.
ALLOC_TESTS := TestHitPathAllocatesNothing TestRepeatedParametersAreCheap TestRememberingAURIAllocatesTwice \
  TestAdmitBehindProxyAllocates TestFramingCheckAllocatesNothing TestFairQueueStraightThrough \
  TestTopSamplingAllocatesNothing TestFinalAnswersAreImmutable TestKeyAllocatesNothing
allocs:
	@set -e; \
	counting=$$(grep -rl --include='*_test.go' 'AllocsPerRun' . | xargs awk '/^func Test/{n=$$2; sub(/\(.*/,"",n)} /AllocsPerRun/ && n!=""{print n}' | sort -u); \
	for n in $$counting; do case " $(ALLOC_TESTS) " in *" $$n "*) ;; *) echo "allocs: $$n counts allocations and is not in ALLOC_TESTS"; exit 1;; esac; done; \
	pattern="^($$(echo $(ALLOC_TESTS) | tr ' ' '|'))\$$"; \
	out=$$($(GO) test -count=1 -v -run "$$pattern" ./... 2>&1) || { echo "$$out" | grep -v '^=== \|^ok \|no test files'; exit 1; }; \
	for n in $(ALLOC_TESTS); do echo "$$out" | grep -q -- "^--- PASS: $$n " || { echo "allocs: $$n did not run and pass"; exit 1; }; done; \
	echo "allocs: $(words $(ALLOC_TESTS)) allocation tests passed without -race"

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./proxy/... ./cache/... ./signer ./tcpio

bench-compare: build
	bench/compare

# What one question runs (docs/design.md, Code map): for a hit, a
# whole-key miss and a per-hash miss of 3 hashes, the module's functions,
# files and packages (explorer-sim, metrics and tcpio aside), from Go's
# coverage counters cleared before the request and read after it
# (bench/path). PATH_LIST=1 lists the functions by file. Not in make test.
PATH_LIST ?=
path:
	@d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	$(GO) build -cover -covermode=atomic -coverpkg=explorer-edge/... -o "$$d/edge-path" ./bench/path && \
	GOCOVERDIR="$$d" "$$d/edge-path" $(if $(PATH_LIST),-list)

bench-replay:
	$(GO) run ./bench/replay

# Block pages (cache.block_pages) off and on, under today's mix and a
# block-list-heavy one: upstream calls per 1000 requests (~1 min).
bench-replay-blocks:
	$(GO) run ./bench/replay -blocks -n 20000

# A key space larger than the cache: Zipf over 100,000 settled pages, a
# 4 MiB cache; upstream calls per 1000 requests and hit ratio, 3 runs (~1 min).
# DISK_MIB=256 puts a disk tier of 256 MiB (in a temporary directory)
# under the 4 MiB cache (docs/disk.md).
DISK_MIB ?= 0
bench-replay-zipf:
	$(GO) run ./bench/replay -zipf -n 200000 -keys 100000 -cache-mib 4 -runs 3 -max-time 30s -disk-mib $(DISK_MIB)

# The memory bound with the largest answers: an upstream answering 8 MB
# per question at the full budget, the edge's RSS peak against
# 1.5 x max_bytes + 64 MiB; fails above it (~1 min).
bench-memory: build
	$(GO) run ./bench/membound

# The event stream against polling (docs/stream.md): explorer-sim making a
# block a second, 1,000 and 10,000 EventSource subscribers on one edge,
# then as many clients polling every second (~2 minutes). Not in make test.
bench-stream: build
	$(GO) run ./bench/stream -n 1000,10000 -duration 20s

# The browser workload of bench/compare (Accept-Encoding: gzip, deflate,
# br, zstd) beside the identity single key, edge-p1 against nginx with gzip
# on, 3 rounds (~1 min); a Markdown table at the end.
bench-browser: build
	ROUNDS=3 DURATION=5 WARM=1 EDGE_PROCS=1 NGINX_W1=0 BARE=0 WORKLOADS="single browser" bench/compare

# Every fuzz target for FUZZTIME each (the hardening runs used 10m).
# Seed corpora live in testdata/fuzz/<target>/ beside each package.
FUZZTIME ?= 60s
FUZZ_TARGETS := proxy/route:FuzzParams proxy/admission:FuzzVerify proxy:FuzzUpstreamAnswer config:FuzzConfig signer:FuzzParseTimestamp cache/disk:FuzzDiskRecord
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t#*:}; \
	  echo "== $$name ($$pkg, $(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) ./$$pkg; \
	done

# CI: each target for a number of executions (10-40 s each here). A
# count, unlike a duration, cannot race Go's fuzzing coordinator at its
# deadline ("context deadline exceeded" with no input: go.dev/issue/75804),
# and minimizing a new input is bounded by a count too.
FUZZ_CI := proxy/route:FuzzParams:100000 proxy/admission:FuzzVerify:100000 proxy:FuzzUpstreamAnswer:15000 config:FuzzConfig:40000 signer:FuzzParseTimestamp:400000 cache/disk:FuzzDiskRecord:200000
fuzz-ci:
	@set -e; for t in $(FUZZ_CI); do \
	  pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; n=$${rest#*:}; \
	  echo "== $$name ($$pkg, $${n} executions)"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $${n}x -fuzzminimizetime 200x ./$$pkg; \
	done

# The soak: explorer-sim with faults and explorer-edge (two nodes sharing a
# redis-server the soak starts: redis-server must be on PATH, or
# SOAK_FLAGS=-fleet=false) under mixed load and hostile clients for
# SOAK_DURATION; every answer is checked, and the upstream calls against the
# budget. See docs/reliability.md, Soak.
SOAK_DURATION ?= 60s
MODEL_STEPS ?= 600
SOAK_FLAGS ?=
soak: build
	$(GO) run ./bench/soak -duration $(SOAK_DURATION) $(SOAK_FLAGS)
	# The chain model (proxy/model_test.go) for 600 steps rather than make
	# test's 60: reorgs, purges, a fleet that grows (each node with a disk
	# tier), a lagging and a failing account, tracing and a binding
	# budget, against an oracle (~2 min).
	MODEL_STEPS=$(MODEL_STEPS) $(GO) test -count=1 -timeout 15m -run '^TestChainModel$$' -v ./proxy

clean:
	rm -rf $(BIN)
