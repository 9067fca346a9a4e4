package deploy_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestCompose: docs/compose/docker-compose.yml runs the image `make image` tags (its default
// is the leafd:latest that scripts/image.sh adds), and each leafd instance publishes RESP and
// the admin port on loopback host ports of its own, with its own volume and ZooKeeper
// identity, on the shared database (there is no Docker engine here to run it: the file is
// checked as YAML with its anchors resolved).
func TestCompose(t *testing.T) {
	b, err := os.ReadFile("../docs/compose/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Ports       []string          `yaml:"ports"`
			Volumes     []string          `yaml:"volumes"`
			Environment map[string]string `yaml:"environment"`
			DependsOn   map[string]any    `yaml:"depends_on"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("../scripts/image.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^\$\{LEAFD_IMAGE:-([^}]+)\}$`)
	hostPorts, volumes, idents := map[string]string{}, map[string]string{}, map[string]string{}
	n := 0
	for name, s := range doc.Services {
		if !strings.HasPrefix(name, "leafd") {
			continue
		}
		n++
		def := m.FindStringSubmatch(s.Image)
		if def == nil || !strings.Contains(string(script), "latest="+def[1]) {
			t.Errorf("%s: image %q, want ${LEAFD_IMAGE:-<the tag scripts/image.sh adds>}", name, s.Image)
		}
		published := map[string]bool{}
		for _, p := range s.Ports {
			f := strings.Split(p, ":")
			if len(f) != 3 || f[0] != "127.0.0.1" {
				t.Errorf("%s: port %q, want 127.0.0.1:<host>:<container> (loopback only)", name, p)
				continue
			}
			published[f[2]] = true
			if other, dup := hostPorts[f[1]]; dup {
				t.Errorf("%s and %s both publish host port %s", name, other, f[1])
			}
			hostPorts[f[1]] = name
		}
		if !published["6380"] || !published["8080"] {
			t.Errorf("%s: publishes %v, want RESP 6380 and the admin port 8080", name, s.Ports)
		}
		if len(s.Volumes) != 1 || !strings.HasSuffix(s.Volumes[0], ":/data") {
			t.Errorf("%s: volumes %v, want one volume on /data", name, s.Volumes)
		} else if other, dup := volumes[s.Volumes[0]]; dup {
			t.Errorf("%s and %s share the volume %s (one time bound per data dir)", name, other, s.Volumes[0])
		} else {
			volumes[s.Volumes[0]] = name
		}
		id := s.Environment["LEAFD_ADVERTISE_ADDR"]
		if other, dup := idents[id]; dup || id == "" {
			t.Errorf("%s: LEAFD_ADVERTISE_ADDR %q, shared with %s (the ZooKeeper identity must be unique)", name, id, other)
		}
		idents[id] = name
		if !strings.Contains(s.Environment["LEAFD_MYSQL_DSN"], "@tcp(mysql:3306)/") || s.Environment["LEAFD_ZK_ADDRS"] == "" {
			t.Errorf("%s: environment %v, want the shared mysql service and ZooKeeper", name, s.Environment)
		}
		if s.DependsOn["mysql"] == nil {
			t.Errorf("%s: does not wait for mysql", name)
		}
	}
	if n < 3 {
		t.Errorf("compose: %d leafd services, want 3", n)
	}
}
