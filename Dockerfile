# syntax=docker/dockerfile:1
#
# explorer-edge image: both binaries on distroless/static, running as nonroot.
#
#   docker build -t explorer-edge:latest .
#   docker run --rm -p 8080:8080 -p 8081:8081 \
#     -e EDGE_UPSTREAM__BASE_URL=https://explorer.example \
#     -e EDGE_UPSTREAM__API_KEY=... -e EDGE_UPSTREAM__SECRET_KEY=... -e EDGE_UPSTREAM__PASSPHRASE=... \
#     explorer-edge:latest
#   docker run --rm explorer-edge:latest -check-config          # validate the baked-in config
#   docker run --rm --entrypoint /usr/local/bin/explorer-sim explorer-edge:latest
#
# Secrets are never baked in: every config key can be set from EDGE_* variables.

ARG GO_VERSION=1.26

# Build on the builder's own platform and cross-compile (pure Go, CGO off), so
# `docker buildx build --platform linux/amd64,linux/arm64` needs no emulation.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
# Override when the default module proxy is not reachable from the build host.
ARG GOPROXY=https://proxy.golang.org,direct
ENV GOPROXY=${GOPROXY} \
    GOFLAGS=-mod=readonly \
    CGO_ENABLED=0
WORKDIR /src

# Modules first: this layer is reused until go.mod/go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download

COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/explorer-edge ./cmd/explorer-sim

# distroless/static: no shell, no libc, CA certificates and tzdata included;
# the :nonroot tag runs as uid/gid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/explorer-edge /out/explorer-sim /usr/local/bin/
# The shipped, commented config.yaml; Kubernetes mounts its ConfigMap over
# /etc/explorer-edge (deploy/k8s/deployment.yaml).
COPY config.yaml /etc/explorer-edge/config.yaml
USER nonroot:nonroot
# 8080 public API (listen), 8081 /metrics /healthz /readyz (admin_listen).
EXPOSE 8080 8081
# Flags given to `docker run` or Kubernetes `args` are appended; a repeated
# -config overrides this one (the last one wins).
ENTRYPOINT ["/usr/local/bin/explorer-edge", "-config", "/etc/explorer-edge/config.yaml"]
