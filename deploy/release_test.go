package deploy_test

import (
	"bytes"
	"context"
	"debug/elf"
	"debug/macho"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRelease: `make release VERSION=v0.1.0` leaves in dist/ a stripped static binary for each
// of linux/amd64, linux/arm64 and darwin/arm64, named leafd-v0.1.0-<os>-<arch>, and
// SHA256SUMS that verifies them; the linux/amd64 one prints the stamped version. The output
// goes to a temporary directory (LEAFD_DIST) and the image step is left to TestImage
// (LEAFD_RELEASE_IMAGE=0). Three cross-compilations take minutes on a loaded machine.
func TestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles three binaries")
	}
	const version = "v0.1.0"
	dist := filepath.Join(t.TempDir(), "dist")
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "-C", "..", "release", "VERSION="+version)
	cmd.Env = append(os.Environ(), "LEAFD_DIST="+dist, "LEAFD_RELEASE_IMAGE=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, lastLines(string(out), 20))
	}
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = dist
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		os, arch string
		machine  any
	}{
		{"linux", "amd64", elf.EM_X86_64},
		{"linux", "arm64", elf.EM_AARCH64},
		{"darwin", "arm64", macho.CpuArm64},
	} {
		name := "leafd-" + version + "-" + tc.os + "-" + tc.arch
		path := filepath.Join(dist, name)
		if !bytes.Contains(sums, []byte("  "+name+"\n")) {
			t.Errorf("SHA256SUMS has no line for %s:\n%s", name, sums)
		}
		if tc.os == "darwin" {
			f, err := macho.Open(path)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if f.Cpu != tc.machine {
				t.Errorf("%s: cpu %v, want %v", name, f.Cpu, tc.machine)
			}
			f.Close()
		} else {
			checkELF(t, path, tc.machine.(elf.Machine))
		}
		// How it was built, as Go recorded it (a -trimpath build records no -ldflags: the
		// stamp and the stripping are checked on the binaries themselves).
		info, err := exec.Command("go", "version", "-m", path).Output()
		if err != nil {
			t.Errorf("go version -m %s: %v", name, err)
			continue
		}
		for _, want := range []string{"-trimpath=true", "CGO_ENABLED=0", "GOOS=" + tc.os, "GOARCH=" + tc.arch} {
			if !bytes.Contains(info, []byte(want)) {
				t.Errorf("%s: built without %q:\n%s", name, want, info)
			}
		}
	}
	out, err := exec.Command(filepath.Join(dist, "leafd-"+version+"-linux-amd64"), "--version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "leafd "+version {
		t.Errorf("leafd --version: got %q, %v; want \"leafd %s\"", out, err, version)
	}
}

// checkELF: a static (no PT_INTERP), stripped (no .symtab) binary for machine.
func checkELF(t *testing.T, path string, machine elf.Machine) {
	t.Helper()
	name := filepath.Base(path)
	f, err := elf.Open(path)
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	defer f.Close()
	if f.Machine != machine {
		t.Errorf("%s: machine %v, want %v", name, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: dynamically linked (PT_INTERP), want CGO_ENABLED=0", name)
		}
	}
	if f.Section(".symtab") != nil {
		t.Errorf("%s: has a symbol table, want -s -w", name)
	}
}
