# syntax=docker/dockerfile:1
# Parley's image: one static binary (the offline embedding model, migrations,
# console assets and OpenAPI document are compiled in) on distroless, run as
# a non-root user. `make image` builds it; compose.yaml runs a deployment.
#
#   docker build -t parley .
#   docker run --rm parley help

ARG GO_VERSION=1.26.8

# Build on the builder's own platform and cross-compile (no cgo, so no
# emulation is needed for another GOARCH).
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
# go.mod replaces github.com/ledongthuc/pdf with ./third_party/pdf: without
# its go.mod here, `go mod download` fails ("reading third_party/pdf/go.mod").
COPY third_party/pdf/go.mod third_party/pdf/
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -buildvcs=false -ldflags='-s -w' -o /out/parley ./backend/cmd/parley

# distroless/static: CA certificates and time zones, no shell, no libc.
# Health checks run `parley healthcheck` (there is no curl); none is set here
# because `parley worker` serves no HTTP: compose.yaml sets it per service.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/parley /usr/local/bin/parley
# nonroot is uid 65532.
USER 65532:65532
ENV PARLEY_ADDR=:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/parley"]
CMD ["serve"]
