# Multi-stage build: a static leafd binary on a distroless-like scratch image, run as non-root.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/leafd ./cmd/leafd \
 && mkdir -p /out/data

FROM scratch
COPY --from=build /out/leafd /leafd
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
# In a container the listen addresses must not be loopback; set them explicitly. The admin
# port (/metrics, /readyz, Leaf's HTTP API) has no authentication: keep it on a private network.
ENV LEAFD_ADDR=0.0.0.0:6380 LEAFD_HTTP_ADDR=0.0.0.0:8080 LEAFD_DATA_DIR=/data
EXPOSE 6380 8080
VOLUME /data
ENTRYPOINT ["/leafd"]
