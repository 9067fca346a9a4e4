# leafd: `make run` serves on the embedded defaults; `make test` runs every test (it installs
# and starts MariaDB and ZooKeeper itself, see scripts/test.sh).
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: build run test unit bench bench-micro lint fuzz image release clean

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/leafd ./cmd/leafd

run:
	$(GO) run ./cmd/leafd

test:
	bash scripts/test.sh

# Unit tests only: integration tests skip when their services are absent.
unit:
	$(GO) test -race ./...

# Every figure of docs/BENCHMARKS.md's issue-10 section against redis-server, medians of
# alternating runs as ratios, and the latency plot docs/bench-latency.png (about 15 minutes on
# an idle machine; no section starts after LIMIT=2400 s, so at most about 70 minutes under
# load; needs redis-server, mariadb-server for the refill section, and two cores).
# bench-micro: the Go micro-benchmarks.
bench:
	bash bench/all.sh

bench-micro:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./segment/ ./snowflake/ ./resp/ ./handlers/

# staticcheck is pinned; go run fetches it from the Go module proxy the first time.
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(STATICCHECK) ./...

fuzz:
	$(GO) test ./resp/ -run '^$$' -fuzz FuzzParser -fuzztime 60s
	$(GO) test ./resp/ -run '^$$' -fuzz FuzzSplitInline -fuzztime 30s
	$(GO) test ./resp/ -run '^$$' -fuzz FuzzInlineMatchesRESP -fuzztime 30s
	$(GO) test ./handlers/ -run '^$$' -fuzz FuzzServe -fuzztime 60s

# The container image (deploy/image/Dockerfile: the static binary built here, on scratch) with
# docker or podman, tagged leafd:$(VERSION) and leafd:latest (what docs/compose runs).
image:
	VERSION=$(VERSION) bash scripts/image.sh

# A release in dist/: stripped static binaries for linux/amd64, linux/arm64 and darwin/arm64
# stamped with VERSION, SHA256SUMS, and the image leafd:VERSION when docker or podman runs
# (skipped with a message otherwise). make release VERSION=v0.1.0
release:
	@case "$(VERSION)" in v[0-9]*.[0-9]*.[0-9]*) ;; *) echo "make release: set VERSION=vX.Y.Z (got $(VERSION))" >&2; exit 2 ;; esac
	bash scripts/release.sh $(VERSION)

clean:
	rm -rf bin dist leafd-data
