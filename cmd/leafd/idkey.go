package main

import (
	"fmt"
	"os"

	"github.com/leafd/leafd/shape"
)

// readIDKey reads --id-key-file (nil when unset). Errors name the file, never its content.
func readIDKey(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--id-key-file: %w", err)
	}
	k, err := shape.ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("--id-key-file %s: %w", path, err)
	}
	return k, nil
}
