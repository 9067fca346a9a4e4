# The image tested here (scripts/image.sh, `make image`; deploy/image_test.go builds and runs
# it): a static leafd built by `go build` outside, on scratch, so no registry is needed. The
# build context is the directory scripts/image.sh stages: leafd (CGO_ENABLED=0), the host's
# CA bundle, passwd/group (deploy/image/) naming the non-root user, and an empty data/.
# Dockerfile.multistage builds the same image with a golang build stage (needs a registry).
FROM scratch
COPY passwd group /etc/
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --chown=65532:65532 data /data
COPY leafd /leafd
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
