// Package deploy_test checks what deploy/ ships beside the binary: the container image built
// from ../Dockerfile and run with podman, the Kubernetes manifests, the Prometheus rules (with
// promtool) and the Grafana dashboard (against a real scrape of leafd).
package deploy_test
