package deploy_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// imageEntry is the kustomize images: entry of deploy/kubernetes/image, the one place the
// manifests take leafd's image from.
func imageEntry(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("kubernetes/image/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Kind   string `yaml:"kind"`
		Images []struct {
			Name    string `yaml:"name"`
			NewName string `yaml:"newName"`
			NewTag  string `yaml:"newTag"`
		} `yaml:"images"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	if k.Kind != "Component" || len(k.Images) != 1 || k.Images[0].Name != "leafd" || k.Images[0].NewName == "" || k.Images[0].NewTag == "" {
		t.Fatalf("kubernetes/image: got %+v, want a Component with one images: entry for leafd (newName, newTag)", k)
	}
	return k.Images[0].NewName + ":" + k.Images[0].NewTag
}

// TestImageOnePlace: every overlay's pods run the image of deploy/kubernetes/image's images:
// entry (the manifests themselves name only "leafd"), and the compose file's default image is
// the same name and tag.
func TestImageOnePlace(t *testing.T) {
	want := imageEntry(t)
	for _, o := range overlays {
		n := 0
		for _, w := range append(byKind(render(t, o), "Deployment"), byKind(render(t, o), "StatefulSet")...) {
			cs, _ := w.get("spec.template.spec.containers").([]any)
			for i := range cs {
				n++
				if got := obj(cs[i].(map[string]any)).str("image"); got != want {
					t.Errorf("%s %s: image %q, want %q (deploy/kubernetes/image)", o, w.id(), got, want)
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: no container rendered", o)
		}
	}
	for _, f := range []string{"kubernetes/base/deployment.yaml", "kubernetes/overlays/snowflake-statefulset/statefulset.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^\s*image:\s*(\S+)`).FindAllStringSubmatch(string(b), -1) {
			if m[1] != "leafd" {
				t.Errorf("%s: image %s, want the name leafd that deploy/kubernetes/image sets", f, m[1])
			}
		}
	}
	b, err := os.ReadFile("../docs/compose/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*image:\s*(\S+)`).FindAllStringSubmatch(string(b), -1) {
		img := m[1]
		if strings.HasPrefix(img, "${LEAFD_IMAGE:-") {
			if got := strings.TrimSuffix(strings.TrimPrefix(img, "${LEAFD_IMAGE:-"), "}"); got != want {
				t.Errorf("compose: leafd image default %q, want %q (deploy/kubernetes/image)", got, want)
			}
			continue
		}
		if !strings.HasPrefix(img, "docker.io/") {
			t.Errorf("compose: image %s is not fully qualified (docker.io/library/...)", img)
		}
	}
}
