package deploy_test

import (
	"os"
	"strings"
	"testing"
)

// TestDockerfilesAgree: Dockerfile.multistage (not built here: it needs a registry) ends like
// the tested Dockerfile, from USER on, so both images run the same way.
func TestDockerfilesAgree(t *testing.T) {
	tail := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		i := strings.Index(s, "\nUSER ")
		if i < 0 {
			t.Fatalf("%s: no USER instruction", path)
		}
		return s[i:]
	}
	if a, b := tail("../Dockerfile"), tail("../Dockerfile.multistage"); a != b {
		t.Errorf("Dockerfile and Dockerfile.multistage differ after USER:\n%s\n---\n%s", a, b)
	}
}
