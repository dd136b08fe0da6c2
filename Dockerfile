# One small static image with all three binaries; the role is the command:
#   gateway | worker | reaper   (each also takes "migrate"; reaper "reconcile")
# CI cannot run docker here; `make static` builds the same binaries with the
# same flags and checks that they are static.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# docker build --build-arg VERSION=$(git describe --tags --always) --build-arg COMMIT=$(git rev-parse HEAD)
ARG VERSION=devel
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags="-s -w -X github.com/flashsale/flashsale/pkg/app.Version=${VERSION} -X github.com/flashsale/flashsale/pkg/app.Commit=${COMMIT}" \
      -o /out/ ./cmd/gateway ./cmd/worker ./cmd/reaper

# distroless static: no shell, no package manager, runs as uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
EXPOSE 8080 9090
ENTRYPOINT []
CMD ["/usr/local/bin/gateway"]
