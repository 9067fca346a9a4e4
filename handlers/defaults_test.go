package handlers

import (
	"strings"
	"testing"
	"time"
)

// TestDefaultConfig: a zero Config takes every default of DefaultConfig, the one place they
// are written; Validate names each negative field.
func TestDefaultConfig(t *testing.T) {
	got := Config{}.withDefaults()
	d := DefaultConfig()
	if got.MaxBatch != DefaultMaxBatch || d.MaxBatch != DefaultMaxBatch || got.CreateTimeout != 5*time.Second ||
		got.Version != "dev" || got.AuthMaxFailures != DefaultAuthMaxFailures || got.AuthFailRate != DefaultAuthFailRate ||
		got.AuthFailBurst != DefaultAuthFailBurst || got.Now == nil || got.Sleep == nil {
		t.Errorf("zero Config with defaults: got %+v, want DefaultConfig's values", got)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate(): %v", err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v, want valid (zero means the default)", err)
	}
	err := Config{MaxBatch: -1, CreateTimeout: -time.Second, AuthFailRate: -2}.Validate()
	for _, name := range []string{"MaxBatch", "CreateTimeout", "AuthFailRate"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Validate of negative fields: got %v, want it to name %s", err, name)
		}
	}
	if h := New(Config{MaxBatch: 7}, nil, nil, nil); h.cfg.MaxBatch != 7 || h.cfg.CreateTimeout != d.CreateTimeout {
		t.Errorf("New keeps a set field and defaults the others: got %+v", h.cfg)
	}
}
