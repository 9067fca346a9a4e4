package main

import (
	"fmt"
	"os"
	"time"

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

// periodClock is the clock of shaped tags' periods: the wall clock shifted by off (nil: the
// handlers' default).
func periodClock(off time.Duration) func() time.Time {
	if off == 0 {
		return nil
	}
	return func() time.Time { return time.Now().Add(off) }
}
