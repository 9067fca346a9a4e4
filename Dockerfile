# The leafd image from a plain clone: `docker build -t leafd .` or `podman build -t leafd .`
# (add --build-arg VERSION=$(git describe --tags --always --dirty) to stamp the version; the
# build context has no .git, so unstamped it reports "unknown"). The base image is fully
# qualified, so no short-name resolution is needed. Multi-stage: a golang stage builds a static
# leafd (CGO_ENABLED=0), the image is scratch with it, the CA bundle, passwd/group naming the
# non-root user 65532 and an empty /data.
#
# It needs a registry for golang:; the tests run without one, so they build the same image
# from deploy/image/Dockerfile (scripts/image.sh, `make image`: the binary built outside) and
# check that this file is its twin: the same instructions from USER on, every COPY source
# present in a clone and not excluded by .dockerignore (deploy/dockerfile_test.go).
FROM docker.io/library/golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/leafd ./cmd/leafd \
 && mkdir -p /out/data

FROM scratch
COPY deploy/image/passwd deploy/image/group /etc/
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build /out/leafd /leafd
USER 65532:65532
# In a container the listen addresses must not be loopback. The admin port (/metrics,
# /readyz, /status, Leaf's HTTP API) requires the password (LEAFD_REQUIREPASS_FILE) or its own
# token (LEAFD_HTTP_AUTH_FILE) when one is set; without either it is open: keep it private.
ENV LEAFD_ADDR=0.0.0.0:6380 LEAFD_HTTP_ADDR=0.0.0.0:8080 LEAFD_DATA_DIR=/data
EXPOSE 6380 8080
VOLUME /data
# No shell or curl in the image: the binary probes its own admin port (LEAFD_HTTP_ADDR).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["/leafd", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/leafd"]
