# syntax=docker/dockerfile:1
# check=error=true

# rolloutd's container image: a static Go binary on distroless, as a
# non-root user, with no shell and no package manager.
#
#   docker build --build-arg VERSION=0.1.0 -t rolloutd:0.1.0 .
#
# deploy/check lints this file with buildkit's own rules and runs the build
# stage's `go build` line, then starts the binary with the Deployment's args.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
# Download modules in their own layer, so a source change does not refetch them.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The version goes into the binary (main.version) and the image's OCI label.
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w -X main.version=${VERSION}" -o bin/rolloutd ./cmd/rolloutd

# distroless static, :nonroot: CA certificates and tzdata, uid/gid 65532,
# nothing else.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="rolloutd" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /src/bin/rolloutd /rolloutd
USER 65532:65532
# gRPC (--listen) and Prometheus metrics plus pprof (--metrics-listen).
EXPOSE 50051 9090
ENTRYPOINT ["/rolloutd"]
