package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/leafd/leafd/internal/testenv"
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

func (o obj) id() string { return o.str("kind") + "/" + o.str("metadata.name") }

// overlays are the kustomize overlays of deploy/kubernetes, each applied on its own.
var overlays = []string{"segment", "mysql-workers", "snowflake-statefulset"}

// render runs kubectl kustomize on an overlay and decodes the objects it prints.
func render(t *testing.T, overlay string) []obj {
	t.Helper()
	kubectl := testenv.Tool(t, "kubectl", "kubectl")
	out, err := exec.Command(kubectl, "kustomize", filepath.Join("kubernetes", "overlays", overlay)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl kustomize %s: %v\n%s", overlay, err, ee.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v", overlay, err)
	}
	var objs []obj
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var m map[string]any // not obj: yaml.v3 would make the nested maps obj too
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", overlay, err)
		}
		if m == nil {
			continue
		}
		o := obj(m)
		if o.str("apiVersion") == "" || o.str("kind") == "" || o.str("metadata.name") == "" {
			t.Errorf("%s: object without apiVersion, kind or metadata.name: %v", overlay, o)
		}
		objs = append(objs, o)
	}
	return objs
}

func byKind(objs []obj, kind string) []obj {
	var out []obj
	for _, o := range objs {
		if o.str("kind") == kind {
			out = append(out, o)
		}
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

// selects reports whether a label selector (matchLabels or a Service's selector) is set and
// matches the labels.
func selects(selector, labels any) bool {
	sm, _ := selector.(map[string]any)
	lm, _ := labels.(map[string]any)
	if len(sm) == 0 {
		return false
	}
	for k, v := range sm {
		if lm[k] != v {
			return false
		}
	}
	return true
}

// mib parses a Kubernetes, Go or systemd memory quantity (512Mi, 1Gi, 900MiB, 1G; systemd's
// M and G are powers of 1024) into MiB.
func mib(t *testing.T, s string) float64 {
	t.Helper()
	m := regexp.MustCompile(`^([0-9]+)(Mi|Gi|MiB|GiB|M|G)$`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("memory quantity %q: want <n>Mi, Gi, MiB, GiB, M or G", s)
	}
	n, _ := strconv.ParseFloat(m[1], 64)
	if strings.HasPrefix(m[2], "G") {
		n *= 1024
	}
	return n
}

// Per-connection memory outside the two configurable buffers (README "Limits"): a 4 MiB
// transaction, 64 KiB of pending replies, 80 KiB of argument tables, 64 KiB of stacks; and
// what the process needs beside its clients (runtime, stores, tags): a margin of 64 MiB.
const (
	connFixedMiB   = 4 + (64+80+64)/1024.0
	processBaseMiB = 64
	defaultOutMiB  = 1 // --max-output-buffer's default
	defaultQueryB  = 4 << 20
)

// checkMemoryBudget: the worst case of --maxclients connections (env LEAFD_MAXCLIENTS, with
// the buffers the environment sets) fits GOMEMLIMIT, itself under the memory limit (MiB).
func checkMemoryBudget(t *testing.T, name string, e map[string]string, limit float64) {
	t.Helper()
	if e["GOMEMLIMIT"] == "" || e["LEAFD_MAXCLIENTS"] == "" {
		t.Fatalf("%s: GOMEMLIMIT %q and LEAFD_MAXCLIENTS %q must both be set (the default 10,000 clients do not fit a pod)", name, e["GOMEMLIMIT"], e["LEAFD_MAXCLIENTS"])
	}
	goLimit := mib(t, e["GOMEMLIMIT"])
	clients, _ := strconv.Atoi(e["LEAFD_MAXCLIENTS"])
	query := float64(defaultQueryB)
	if v := e["LEAFD_MAX_QUERY_BUFFER"]; v != "" {
		query, _ = strconv.ParseFloat(v, 64)
	}
	out := float64(defaultOutMiB)
	if v := e["LEAFD_MAX_OUTPUT_BUFFER"]; v != "" {
		b, _ := strconv.ParseFloat(v, 64)
		out = b / (1 << 20)
	}
	perConn := query/(1<<20) + out + connFixedMiB
	need := float64(clients)*perConn + processBaseMiB
	if clients < 1 || need > goLimit || goLimit >= limit {
		t.Errorf("%s: %d clients × %.2f MiB + %d MiB = %.0f MiB must fit GOMEMLIMIT %.0f MiB, itself under the %.0f MiB limit",
			name, clients, perConn, processBaseMiB, need, goLimit, limit)
	}
	if bulk := e["LEAFD_MAX_BULK"]; bulk != "" {
		if b, _ := strconv.ParseFloat(bulk, 64); b+64 > query {
			t.Errorf("%s: LEAFD_MAX_BULK %s does not fit LEAFD_MAX_QUERY_BUFFER %.0f", name, bulk, query)
		}
	}

}

// checkWorkload checks what every overlay's workload needs: selector and labels agree,
// probes on the admin port that work with the password, memory fitted to --maxclients,
// non-root, a grace period longer than leafd's shutdown, the data volume, the Secrets it
// reads present in the same render, and a PDB, a Service and a NetworkPolicy that select
// its pods. It returns the container.
func checkWorkload(t *testing.T, overlay string, objs []obj, w obj, readyPath string) obj {
	t.Helper()
	name := overlay + ": " + w.id()
	labels := w.get("spec.template.metadata.labels")
	if !selects(w.get("spec.selector.matchLabels"), labels) {
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
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": readyPath, "startupProbe": "/healthz"} {
		if c.str(probe+".httpGet.path") != path || c.str(probe+".httpGet.port") != "admin" {
			t.Errorf("%s: %s is %v, want GET %s on the admin port", name, probe, c.get(probe), path)
		}
	}
	e := env(c)
	// A password is set, so the admin port requires it: the probes (which carry none) work
	// only with the open-probes option, and the readiness path must be one it leaves open.
	if e["LEAFD_REQUIREPASS_FILE"] == "" && e["LEAFD_REQUIREPASS"] == "" {
		t.Errorf("%s: no password (LEAFD_REQUIREPASS_FILE)", name)
	}
	if e["LEAFD_HTTP_OPEN_PROBES"] != "true" {
		t.Errorf("%s: LEAFD_HTTP_OPEN_PROBES %q: with a password every probe would get 401", name, e["LEAFD_HTTP_OPEN_PROBES"])
	}
	if strings.Contains(readyPath, "tag=") {
		t.Errorf("%s: readiness %s names a tag: open probes leave only a tag-less /readyz open", name, readyPath)
	}

	// Memory: the worst case of --maxclients connections under GOMEMLIMIT, under the limit.
	limit := mib(t, c.str("resources.limits.memory"))
	if c.get("resources.requests.cpu") == nil || c.get("resources.requests.memory") == nil {
		t.Errorf("%s: no cpu and memory requests", name)
	}
	checkMemoryBudget(t, name, e, limit)

	// Volumes: /data, and every Secret it reads is in this render.
	mounts := map[string]string{}
	for _, m := range c["volumeMounts"].([]any) {
		m := obj(m.(map[string]any))
		mounts[m.str("name")] = m.str("mountPath")
	}
	if mounts["data"] != "/data" {
		t.Errorf("%s: the data volume is not mounted at /data", name)
	}
	secrets := map[string]obj{}
	for _, s := range byKind(objs, "Secret") {
		secrets[s.str("metadata.name")] = s
	}
	vols, _ := w.get("spec.template.spec.volumes").([]any)
	for _, v := range vols {
		v := obj(v.(map[string]any))
		if sn := v.str("secret.secretName"); sn != "" {
			if secrets[sn] == nil {
				t.Errorf("%s: volume %s refers to Secret %s, not in this overlay", name, v.str("name"), sn)
			}
			if mounts[v.str("name")] == "" {
				t.Errorf("%s: Secret volume %s is not mounted", name, v.str("name"))
			}
		}
	}
	for k, v := range e {
		if strings.HasSuffix(k, "_FILE") {
			dir := filepath.Dir(v)
			found := false
			for vol, path := range mounts {
				if path == dir {
					found = true
					for _, x := range vols {
						x := obj(x.(map[string]any))
						if x.str("name") == vol {
							if s := secrets[x.str("secret.secretName")]; s == nil || s.get("stringData."+filepath.Base(v)) == nil {
								t.Errorf("%s: %s=%s: the mounted Secret has no key %s", name, k, v, filepath.Base(v))
							}
						}
					}
				}
			}
			if !found {
				t.Errorf("%s: %s=%s is on no mounted volume", name, k, v)
			}
		}
	}

	// The PDB, the Services and the NetworkPolicy select these pods.
	for _, kind := range []string{"PodDisruptionBudget", "NetworkPolicy", "Service"} {
		list := byKind(objs, kind)
		if len(list) == 0 {
			t.Errorf("%s: no %s", overlay, kind)
		}
		for _, o := range list {
			sel := o.get("spec.selector.matchLabels")
			switch kind {
			case "Service":
				sel = o.get("spec.selector")
			case "NetworkPolicy":
				sel = o.get("spec.podSelector.matchLabels")
			}
			if !selects(sel, labels) {
				t.Errorf("%s: %s does not select the pods of %s", overlay, o.id(), w.id())
			}
		}
	}
	for _, p := range byKind(objs, "PodDisruptionBudget") {
		if p.get("spec.minAvailable") == nil && p.get("spec.maxUnavailable") == nil {
			t.Errorf("%s: %s sets neither minAvailable nor maxUnavailable", overlay, p.id())
		}
	}
	for _, np := range byKind(objs, "NetworkPolicy") {
		ing, _ := np.get("spec.ingress").([]any)
		adminOpen, adminRestricted := false, false
		for _, r := range ing {
			r := obj(r.(map[string]any))
			for _, p := range r["ports"].([]any) {
				if obj(p.(map[string]any)).str("port") == "admin" {
					if r["from"] == nil {
						adminOpen = true
					} else {
						adminRestricted = true
					}
				}
			}
		}
		if adminOpen || !adminRestricted {
			t.Errorf("%s: %s lets anyone reach the admin port (or no one): want it from Prometheus's namespace only", overlay, np.id())
		}
	}
	return c
}

// TestKubernetesOverlays renders each kustomize overlay with kubectl kustomize (as kubectl
// apply -k would) and checks it works as applied: one workload of the kind its mode needs,
// with the flags that keep its worker ids apart, Secrets present, probes that pass with the
// password, memory fitted to clients, and PDB, Services and NetworkPolicy on its own pods.
func TestKubernetesOverlays(t *testing.T) {
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			objs := render(t, overlay)
			var workloads []obj
			for _, o := range objs {
				if k := o.str("kind"); k == "Deployment" || k == "StatefulSet" {
					workloads = append(workloads, o)
				}
			}
			if len(workloads) != 1 {
				t.Fatalf("%s: %d workloads, want 1 (one worker-id scheme per overlay)", overlay, len(workloads))
			}
			w := workloads[0]
			switch overlay {
			case "segment":
				c := checkWorkload(t, overlay, objs, w, "/readyz?mode=segment")
				e := env(c)
				if w.str("kind") != "Deployment" || e["LEAFD_MODES"] != "segment" || e["LEAFD_MYSQL_DSN_FILE"] == "" {
					t.Errorf("segment: %s with env %v, want a Deployment with LEAFD_MODES=segment on MySQL", w.id(), e)
				}
				if e["LEAFD_WORKER_SOURCE"] != "" || e["LEAFD_WORKER_ID"] != "" || e["LEAFD_ZK_ADDRS"] != "" {
					t.Errorf("segment: worker-id settings %v in a segment-only overlay", e)
				}
			case "mysql-workers":
				c := checkWorkload(t, overlay, objs, w, "/readyz")
				e := env(c)
				if w.str("kind") != "Deployment" || e["LEAFD_WORKER_SOURCE"] != "mysql" || e["LEAFD_MYSQL_DSN_FILE"] == "" || e["LEAFD_MODES"] != "" {
					t.Errorf("mysql-workers: %s with env %v, want a Deployment of both modes with LEAFD_WORKER_SOURCE=mysql", w.id(), e)
				}
				// A fixed id in a Deployment would be shared by every replica.
				if e["LEAFD_WORKER_ID"] != "" || e["LEAFD_ZK_ADDRS"] != "" {
					t.Errorf("mysql-workers: env %v: worker ids must come from MySQL only", e)
				}
			case "snowflake-statefulset":
				c := checkWorkload(t, overlay, objs, w, "/readyz?mode=snowflake")
				e := env(c)
				if w.str("kind") != "StatefulSet" || e["LEAFD_MODES"] != "snowflake" || e["LEAFD_WORKER_SOURCE"] != "statefulset" ||
					e["LEAFD_POD_ORDINAL"] != "fieldRef:metadata.labels['apps.kubernetes.io/pod-index']" {
					t.Errorf("snowflake-statefulset: %s with env %v, want a StatefulSet, LEAFD_MODES=snowflake, LEAFD_WORKER_SOURCE=statefulset, LEAFD_POD_ORDINAL from the pod index", w.id(), e)
				}
				off, err := strconv.Atoi(e["LEAFD_WORKER_OFFSET"])
				r, _ := w.get("spec.replicas").(int)
				if err != nil || off < 0 || off+r > 1024 {
					t.Errorf("snowflake-statefulset: offset %q + %d replicas must fit the 1024 worker ids", e["LEAFD_WORKER_OFFSET"], r)
				}
				if e["LEAFD_MYSQL_DSN_FILE"] != "" || e["LEAFD_ZK_ADDRS"] != "" || e["LEAFD_WORKER_ID"] != "" {
					t.Errorf("snowflake-statefulset: env %v: no store or other worker-id source", e)
				}
				if w.str("spec.volumeClaimTemplates.0.metadata.name") != "data" {
					t.Error("snowflake-statefulset: /data is not a per-pod volume claim (the time bound must survive a restart)")
				}
				svc := false
				for _, s := range byKind(objs, "Service") {
					svc = svc || (s.str("metadata.name") == w.str("spec.serviceName") && s.str("spec.clusterIP") == "None")
				}
				if !svc {
					t.Errorf("snowflake-statefulset: serviceName %q is no headless Service of the overlay", w.str("spec.serviceName"))
				}
			}
		})
	}
}

// TestKubernetesOverlaysApart: the three overlays applied in one namespace share no object
// (kind and name) and no Service, PDB or NetworkPolicy of one selects the pods of another, so
// no Service mixes two worker-id schemes.
func TestKubernetesOverlaysApart(t *testing.T) {
	seen := map[string]string{}
	pods := map[string]any{}
	rendered := map[string][]obj{}
	for _, overlay := range overlays {
		objs := render(t, overlay)
		rendered[overlay] = objs
		for _, o := range objs {
			if other, dup := seen[o.id()]; dup {
				t.Errorf("%s and %s both define %s: applying both, one overwrites the other", overlay, other, o.id())
			}
			seen[o.id()] = overlay
			if k := o.str("kind"); k == "Deployment" || k == "StatefulSet" {
				pods[overlay] = o.get("spec.template.metadata.labels")
			}
		}
	}
	for overlay, objs := range rendered {
		for _, o := range objs {
			var sel any
			switch o.str("kind") {
			case "Service":
				sel = o.get("spec.selector")
			case "PodDisruptionBudget":
				sel = o.get("spec.selector.matchLabels")
			case "NetworkPolicy":
				sel = o.get("spec.podSelector.matchLabels")
			default:
				continue
			}
			for other, labels := range pods {
				if other != overlay && selects(sel, labels) {
					t.Errorf("%s: %s selects the pods of %s", overlay, o.id(), other)
				}
			}
		}
	}
}

var (
	helpOnce sync.Once
	helpText string
	helpErr  error
)

// leafdFlags lists the flags of this tree's leafd (from --help).
func leafdFlags(t *testing.T) map[string]bool {
	t.Helper()
	helpOnce.Do(func() {
		bin := filepath.Join(os.TempDir(), fmt.Sprintf("leafd-flags-%d", os.Getpid()))
		defer os.Remove(bin)
		if out, err := exec.Command("go", "build", "-o", bin, "../cmd/leafd").CombinedOutput(); err != nil {
			helpErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		out, _ := exec.Command(bin, "--help").CombinedOutput()
		helpText = string(out)
	})
	if helpErr != nil {
		t.Fatal(helpErr)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(helpText, -1) {
		flags[m[1]] = true
	}
	if len(flags) < 20 {
		t.Fatalf("leafd --help: %d flags found:\n%s", len(flags), helpText)
	}
	return flags
}

// TestKubernetesFlags: every LEAFD_* variable the overlays set is a flag of leafd (its
// variable is LEAFD_ + the name upper-cased, '-' as '_').
func TestKubernetesFlags(t *testing.T) {
	flags := leafdFlags(t)
	for _, overlay := range overlays {
		for _, o := range render(t, overlay) {
			cs, _ := o.get("spec.template.spec.containers").([]any)
			for _, c := range cs {
				for name := range env(obj(c.(map[string]any))) {
					if !strings.HasPrefix(name, "LEAFD_") {
						continue
					}
					flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(name, "LEAFD_")), "_", "-")
					if !flags[flag] {
						t.Errorf("%s: %s: leafd has no flag --%s", overlay, name, flag)
					}
				}
			}
		}
	}
}

// TestScrapeConfig: deploy/prometheus/prometheus.yml defines the job the alert rules name
// (up{job="leafd"}), keeps the pods the overlays label and their port named admin, and is a
// valid Prometheus configuration (promtool check config; Debian's Prometheus has no
// Kubernetes discovery, so it is checked with a static target in its place).
func TestScrapeConfig(t *testing.T) {
	b, err := os.ReadFile("prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ScrapeConfigs []struct {
			JobName        string `yaml:"job_name"`
			RelabelConfigs []struct {
				SourceLabels []string `yaml:"source_labels"`
				Regex        string   `yaml:"regex"`
				Action       string   `yaml:"action"`
			} `yaml:"relabel_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile("prometheus/leafd-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	jobs := regexp.MustCompile(`job="([^"]+)"`).FindAllStringSubmatch(string(rules), -1)
	if len(jobs) == 0 {
		t.Fatal("leafd-rules.yml: no job label (LeafdDown uses up{job=...})")
	}
	for _, j := range jobs {
		found := false
		for _, sc := range cfg.ScrapeConfigs {
			if sc.JobName != j[1] {
				continue
			}
			found = true
			keeps := map[string]string{}
			for _, r := range sc.RelabelConfigs {
				if r.Action == "keep" && len(r.SourceLabels) == 1 {
					keeps[r.SourceLabels[0]] = r.Regex
				}
			}
			if keeps["__meta_kubernetes_pod_label_app_kubernetes_io_name"] != "leafd" || keeps["__meta_kubernetes_pod_container_port_name"] != "admin" {
				t.Errorf("job %s: keeps %v, want the pods labelled app.kubernetes.io/name=leafd, port admin", j[1], keeps)
			}
		}
		if !found {
			t.Errorf("the rules use job=%q, which prometheus.yml does not scrape", j[1])
		}
	}
	for _, overlay := range overlays {
		for _, o := range render(t, overlay) {
			if k := o.str("kind"); k == "Deployment" || k == "StatefulSet" {
				labels, _ := o.get("spec.template.metadata.labels").(map[string]any)
				if labels["app.kubernetes.io/name"] != "leafd" {
					t.Errorf("%s: %s pods are not labelled app.kubernetes.io/name=leafd: the scrape job would miss them", overlay, o.id())
				}
			}
		}
	}

	promtool := testenv.Tool(t, "promtool", "prometheus")
	dir := t.TempDir()
	cred := filepath.Join(dir, "requirepass")
	if err := os.WriteFile(cred, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs("prometheus/leafd-rules.yml")
	s := strings.Replace(string(b), "    kubernetes_sd_configs:\n      - role: pod\n", "    static_configs:\n      - targets: [\"127.0.0.1:8080\"]\n", 1)
	s = strings.Replace(s, "/etc/prometheus/secrets/leafd-auth/requirepass", cred, 1)
	s = strings.Replace(s, "  - leafd-rules.yml", "  - "+abs, 1)
	if s == string(b) || strings.Contains(s, "kubernetes_sd_configs") {
		t.Fatal("prometheus.yml: the kubernetes_sd_configs block to replace was not found")
	}
	p := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "config", p).CombinedOutput(); err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
}
