# syntax=docker/dockerfile:1
#
# explorer-edge image: both binaries on distroless/static, running as nonroot.
#
#   make image        # tags explorer-edge:$(git describe ...) and explorer-edge:latest
#   docker build -t explorer-edge:latest --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg REVISION=$(git rev-parse HEAD) .
#   docker run --rm -p 8080:8080 -p 8081:8081 \
#     -e EDGE_UPSTREAM__BASE_URL=https://explorer.example \
#     -e EDGE_UPSTREAM__API_KEY=... -e EDGE_UPSTREAM__SECRET_KEY=... -e EDGE_UPSTREAM__PASSPHRASE=... \
#     explorer-edge:latest
#   docker run --rm explorer-edge:latest -check-config          # validate the baked-in config
#   docker run --rm explorer-edge:latest -version
#
# explorer-sim in a container of its own, reached by name from the edge's
# (it listens on loopback unless told otherwise):
#   docker network create edge-net
#   docker run -d --rm --name sim --network edge-net --entrypoint /usr/local/bin/explorer-sim \
#     explorer-edge:latest -listen 0.0.0.0:8900
#   docker run --rm --network edge-net -p 8080:8080 -p 8081:8081 \
#     -e EDGE_UPSTREAM__BASE_URL=http://sim:8900 explorer-edge:latest
#
# Secrets are never baked in: every config key can be set from EDGE_* variables.

ARG GO_VERSION=1.26
# The build's name: .git is not in the build context (.dockerignore), so
# make image passes them from git. They go into the binary (-version, the
# explorer_edge_build_info metric, the start log line) and the labels.
ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED=
# The repository's web address, for org.opencontainers.image.source (make
# image passes git's origin when it is an https URL, or SOURCE=...).
ARG SOURCE=

# The base images are named by tag. To pin them by digest (a rebuild then
# gets the same bytes), see deploy/README.md, Image: append @sha256:... to
# each FROM's image (and to base.name below); Docker checks the digest.
# Build on the builder's own platform and cross-compile (pure Go, CGO off), so
# `docker buildx build --platform linux/amd64,linux/arm64` needs no emulation.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION
ARG REVISION
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
    go build -trimpath -ldflags="-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" \
      -o /out/ ./cmd/explorer-edge ./cmd/explorer-sim

# distroless/static: no shell, no libc, CA certificates and tzdata included;
# the :nonroot tag runs as uid/gid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION
ARG REVISION
ARG CREATED
ARG SOURCE
LABEL org.opencontainers.image.title="explorer-edge" \
      org.opencontainers.image.description="Caching edge in front of a chain explorer's read API" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="gcr.io/distroless/static-debian12:nonroot"
COPY --from=build /out/explorer-edge /out/explorer-sim /usr/local/bin/
# The container's config: every interface, JSON logs (the repository's
# config.yaml is make run's, on loopback). Kubernetes mounts its ConfigMap
# over /etc/explorer-edge (deploy/k8s/deployment.yaml).
COPY deploy/container.yaml /etc/explorer-edge/config.yaml
USER nonroot:nonroot
# 8080 public API (listen), 8081 /metrics /healthz /readyz (admin_listen).
EXPOSE 8080 8081
# distroless has no shell and no curl: the binary asks its own admin port's
# /healthz (admin_listen of the same config; 127.0.0.1 for a listener on
# every interface). Liveness, not /readyz: an edge with an empty cache during
# an upstream outage is unready, and Swarm or autoheal would restart it and
# throw away whatever it had. Kubernetes ignores HEALTHCHECK and uses its probes.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/explorer-edge", "-config", "/etc/explorer-edge/config.yaml", "-healthcheck"]
# Flags given to `docker run` or Kubernetes `args` are appended; a repeated
# -config overrides this one (the last one wins).
ENTRYPOINT ["/usr/local/bin/explorer-edge", "-config", "/etc/explorer-edge/config.yaml"]
