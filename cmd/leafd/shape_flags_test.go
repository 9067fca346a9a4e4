package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSnowflakeBitsJS(t *testing.T) {
	if b, err := parseBits("js"); err != nil || b != [3]int{41, 3, 9} {
		t.Fatalf("js: got %v, %v; want 41/3/9", b, err)
	}
	if _, err := parseBits("30/3/9"); err != nil {
		t.Fatalf("30/3/9 (42 bits): %v", err)
	}
	if _, err := parseBits("41/3/10"); err == nil || !strings.Contains(err.Error(), "at most 53") {
		t.Fatalf("41/3/10 (54 bits): got %v, want refused", err)
	}
}

// The id key is read from its file, whitespace ignored; a bad file is refused without its
// content in the error; CONFIG GET's values never hold it.
func TestIDKeyFile(t *testing.T) {
	dir := t.TempDir()
	const hexKey = "000102030405060708090a0b0c0d0e0f"
	good := filepath.Join(dir, "key")
	if err := os.WriteFile(good, []byte("\n  "+hexKey+"  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := readIDKey(good)
	if err != nil || len(k) != 16 || k[15] != 0x0f {
		t.Fatalf("got %x, %v", k, err)
	}
	bad := filepath.Join(dir, "bad")
	secret := "secretsecretsecretsecretsecretse" // 32 characters, not hex
	if err := os.WriteFile(bad, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readIDKey(bad); err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("bad key file: got %v; want an error without the content", err)
	}
	cfg, err := loadConfig([]string{"--id-key-file", good}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range cfg.configValues() {
		if strings.Contains(v, hexKey) || strings.Contains(v, good) {
			t.Fatalf("CONFIG GET %s shows the id key (or its file): %q", name, v)
		}
	}
}
