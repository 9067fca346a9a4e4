package main

// The end-to-end tests of this package drive leafd through internal/e2e: the binary built
// once by TestMain (with -race) for scenarios that kill, pause or restart it, and the server
// in-process (inProcess) for the others.

import (
	"context"
	"io"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/leafd/leafd/internal/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m, ".") }

// inProcess runs the server as the command would, in this process: the configuration from
// args alone (no LEAFD_* variables), JSON log lines to logOut.
func inProcess(ctx context.Context, args []string, logOut io.Writer) error {
	cfg, err := loadConfig(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		return err
	}
	lvl, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return err
	}
	core := zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(logOut), lvl)
	return run(ctx, cfg, zap.New(core), nil)
}

// startInProcess starts the server in-process on free ports (see e2e.StartInProcess).
func startInProcess(t testing.TB, args ...string) *e2e.Leafd {
	t.Helper()
	return e2e.StartInProcess(t, inProcess, args...)
}
