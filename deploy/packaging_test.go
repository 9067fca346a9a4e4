package deploy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// apache2SHA256 is the SHA-256 of the Apache License 2.0 text as the ASF publishes it
// (LICENSE-2.0.txt; Debian ships the same bytes as /usr/share/common-licenses/Apache-2.0).
const apache2SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"

// TestLicense: LICENSE is the unmodified Apache License 2.0 and the README carries its SPDX
// identifier.
func TestLicense(t *testing.T) {
	b, err := os.ReadFile("../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != apache2SHA256 {
		t.Errorf("LICENSE: sha256 %s, want %s (the Apache License 2.0 text, unmodified)", got, apache2SHA256)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "SPDX-License-Identifier: Apache-2.0") {
		t.Error("README.md: no SPDX-License-Identifier: Apache-2.0 line")
	}
}

// TestVersionStamps: every way leafd is built stamps the version from git describe
// (-X main.version), so `leafd version`, INFO and /status tell builds apart; CHANGELOG.md
// exists with an Unreleased section.
func TestVersionStamps(t *testing.T) {
	for file, want := range map[string][]string{
		"../Makefile":                {"git describe", "-X main.version=$(VERSION)"},
		"../scripts/image.sh":        {"git describe", "-X main.version=$version"},
		"../Dockerfile":              {"ARG VERSION", "-X main.version=${VERSION}"},
		"../deploy/image/Dockerfile": {"COPY leafd /leafd"},
		"../bench/all.sh":            {"git -C \"$root\" describe", "-X main.version=$version"},
		"../bench/compare.sh":        {"git describe", "-X main.version="},
		"../CHANGELOG.md":            {"## Unreleased", "leafd version"},
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s: no %q", file, w)
			}
		}
	}
}
