package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// obj is one decoded Kubernetes object.
type obj map[string]any

// get walks a path of map keys and list indexes ("spec.template.spec.containers.0.ports").
func (o obj) get(path string) any {
	var cur any = map[string]any(o)
	for _, k := range strings.Split(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[k]
		case []any:
			var i int
			if _, err := fmt.Sscan(k, &i); err != nil || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}

func (o obj) str(path string) string { s, _ := o.get(path).(string); return s }

func loadManifests(t *testing.T, path string) map[string]obj {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]obj{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var m map[string]any // not obj: yaml.v3 would make the nested maps obj too
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if m == nil {
			continue
		}
		o := obj(m)
		if o.str("apiVersion") == "" || o.str("kind") == "" || o.str("metadata.name") == "" {
			t.Errorf("%s: object without apiVersion, kind or metadata.name: %v", path, o)
		}
		out[o.str("kind")] = o
	}
	return out
}

// env returns the container's environment: name -> value, or "fieldRef:<path>" /
// "secret:<name>/<key>" for values taken from elsewhere.
func env(c obj) map[string]string {
	out := map[string]string{}
	list, _ := c["env"].([]any)
	for _, e := range list {
		e := obj(e.(map[string]any))
		switch {
		case e.get("valueFrom.fieldRef.fieldPath") != nil:
			out[e.str("name")] = "fieldRef:" + e.str("valueFrom.fieldRef.fieldPath")
		case e.get("valueFrom.secretKeyRef") != nil:
			out[e.str("name")] = "secret:" + e.str("valueFrom.secretKeyRef.name") + "/" + e.str("valueFrom.secretKeyRef.key")
		default:
			out[e.str("name")] = e.str("value")
		}
	}
	return out
}

func sameLabels(a, b any) bool {
	am, _ := a.(map[string]any)
	bm, _ := b.(map[string]any)
	if len(am) == 0 {
		return false
	}
	for k, v := range am {
		if bm[k] != v {
			return false
		}
	}
	return true
}

// checkWorkload checks what both workloads need: selector and labels agree, probes on the
// admin port's /healthz and /readyz, requests, non-root, a grace period longer than
// leafd's shutdown, the data volume, and a PDB that selects the pods.
func checkWorkload(t *testing.T, w, pdb obj) obj {
	t.Helper()
	name := w.str("kind") + "/" + w.str("metadata.name")
	if !sameLabels(w.get("spec.selector.matchLabels"), w.get("spec.template.metadata.labels")) {
		t.Errorf("%s: selector does not match the pod labels", name)
	}
	if r, _ := w.get("spec.replicas").(int); r < 2 {
		t.Errorf("%s: replicas %v, want at least 2", name, w.get("spec.replicas"))
	}
	if g, _ := w.get("spec.template.spec.terminationGracePeriodSeconds").(int); g <= 10 {
		t.Errorf("%s: terminationGracePeriodSeconds %d, want more than leafd's --shutdown-timeout (10s)", name, g)
	}
	if w.get("spec.template.spec.securityContext.runAsNonRoot") != true {
		t.Errorf("%s: runAsNonRoot not set", name)
	}
	c := obj(w.get("spec.template.spec.containers.0").(map[string]any))
	ports := map[string]int{}
	for _, p := range c["ports"].([]any) {
		p := obj(p.(map[string]any))
		ports[p.str("name")], _ = p.get("containerPort").(int)
	}
	if ports["admin"] != 8080 || ports["resp"] != 6380 {
		t.Errorf("%s: ports %v, want resp 6380 and admin 8080 (the image's)", name, ports)
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz", "startupProbe": "/healthz"} {
		if c.str(probe+".httpGet.path") != path || c.str(probe+".httpGet.port") != "admin" {
			t.Errorf("%s: %s is %v, want GET %s on the admin port", name, probe, c.get(probe), path)
		}
	}
	if c.get("resources.requests.cpu") == nil || c.get("resources.requests.memory") == nil {
		t.Errorf("%s: no cpu and memory requests", name)
	}
	if c.str("volumeMounts.0.mountPath") != "/data" {
		t.Errorf("%s: the data volume is not mounted at /data", name)
	}
	if pdb == nil {
		t.Errorf("%s: no PodDisruptionBudget", name)
	} else {
		if !sameLabels(pdb.get("spec.selector.matchLabels"), w.get("spec.template.metadata.labels")) {
			t.Errorf("%s: the PodDisruptionBudget does not select its pods", name)
		}
		if pdb.get("spec.minAvailable") == nil && pdb.get("spec.maxUnavailable") == nil {
			t.Errorf("%s: the PodDisruptionBudget sets neither minAvailable nor maxUnavailable", name)
		}
	}
	return c
}

// TestKubernetesManifests reads deploy/kubernetes as YAML and checks the fields that make
// several replicas safe: above all, that no two replicas can get the same snowflake worker
// id (the Deployment's come from ZooKeeper with reuse, the StatefulSet's from the pod index).
func TestKubernetesManifests(t *testing.T) {
	dep := loadManifests(t, "kubernetes/leafd-deployment.yaml")
	d := dep["Deployment"]
	if d == nil {
		t.Fatal("leafd-deployment.yaml: no Deployment")
	}
	c := checkWorkload(t, d, dep["PodDisruptionBudget"])
	e := env(c)
	// Without ZooKeeper every replica would use the local default worker id 0.
	if e["LEAFD_ZK_ADDRS"] == "" || e["LEAFD_WORKER_ID"] != "" {
		t.Errorf("Deployment: worker ids must come from ZooKeeper (LEAFD_ZK_ADDRS set, LEAFD_WORKER_ID unset); env %v", e)
	}
	if e["LEAFD_WORKER_REUSE"] != "true" {
		t.Errorf("Deployment: LEAFD_WORKER_REUSE %q, want true (pod IPs change on every rollout)", e["LEAFD_WORKER_REUSE"])
	}
	if e["LEAFD_ADVERTISE_ADDR"] != "$(POD_IP):6380" || e["POD_IP"] != "fieldRef:status.podIP" {
		t.Errorf("Deployment: the ZooKeeper identity must be the pod IP; env %v", e)
	}
	if !strings.HasPrefix(e["LEAFD_MYSQL_DSN"], "secret:") || dep["Secret"] == nil {
		t.Errorf("Deployment: LEAFD_MYSQL_DSN must come from a Secret; got %q", e["LEAFD_MYSQL_DSN"])
	}
	if dep["Service"] == nil {
		t.Error("leafd-deployment.yaml: no Service")
	}

	sts := loadManifests(t, "kubernetes/leafd-statefulset.yaml")
	s := sts["StatefulSet"]
	if s == nil {
		t.Fatal("leafd-statefulset.yaml: no StatefulSet")
	}
	c = checkWorkload(t, s, sts["PodDisruptionBudget"])
	e = env(c)
	if e["LEAFD_WORKER_ID"] != "fieldRef:metadata.labels['apps.kubernetes.io/pod-index']" || e["LEAFD_ZK_ADDRS"] != "" {
		t.Errorf("StatefulSet: the worker id must be the pod index (and no ZooKeeper); env %v", e)
	}
	if r, _ := s.get("spec.replicas").(int); r > 1024 {
		t.Errorf("StatefulSet: %d replicas do not fit 10 worker-id bits", r)
	}
	if s.str("spec.volumeClaimTemplates.0.metadata.name") != c.str("volumeMounts.0.name") {
		t.Error("StatefulSet: /data is not the per-pod volume claim (the time bound must survive a restart)")
	}
}
