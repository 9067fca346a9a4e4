// Package deploy_test checks what deploy/ ships beside the binary: the container image built
// from deploy/image/Dockerfile and run with podman, the root Dockerfile as its twin, the
// compose example, the kustomize overlays (rendered with kubectl kustomize), the systemd unit
// (systemd-analyze verify), the Prometheus rules and scrape config (with promtool), the
// Grafana dashboard (against a real scrape of leafd), the LICENSE and the version stamps.
package deploy_test
