// Command leafd is a distributed ID server that speaks the Redis protocol: segment IDs
// (INCR tag) from ranges leased from an embedded store or MySQL, and snowflake IDs
// (IDS.SNOWFLAKE) whose worker id comes from a local file, a flag or ZooKeeper.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

func main() {
	os.Exit(realMain())
}

// realMain is main with an exit code, so that deferred calls run before the one exit.
func realMain() int {
	if len(os.Args) > 1 && (os.Args[1] == "version" || os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println("leafd", leafdVersion())
		return 0
	}
	// The server and every admin tool read the same LEAFD_* variables: none is ignored.
	if err := checkEnviron(os.Environ()); err != nil {
		fmt.Fprintln(os.Stderr, "leafd: configuration:", err)
		return 2
	}
	if len(os.Args) > 1 && os.Args[1] == "health" {
		return health(os.Args[2:], os.Getenv, os.Stderr)
	}
	if len(os.Args) > 1 && os.Args[1] == "raise-max-id" { // the operator's failover command
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return runRaise(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
	}
	if len(os.Args) > 1 && os.Args[1] == "adopt" { // records fence rows of rows leafd did not create
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return runAdopt(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
	}
	if len(os.Args) > 1 && os.Args[1] == "region" { // the region procedures (regiontool.go)
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		return runRegionTool(ctx, os.Args[2:], os.Stdout, os.Stderr)
	}
	cfg, err := loadConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errShowVersion) { // --version after other flags
		fmt.Println("leafd", leafdVersion())
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "leafd: configuration:", err)
		return 2
	}
	log, err := newLogger(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "leafd: logger:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, log, nil); err != nil {
		log.Error("leafd stopped with an error", zap.Error(err))
		return 1
	}
	return 0
}

func newLogger(level, format string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	zc := zap.NewProductionConfig()
	if format == "console" {
		zc = zap.NewDevelopmentConfig()
		zc.Development = false
		zc.DisableStacktrace = true
	}
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.OutputPaths = []string{"stderr"}
	return zc.Build()
}
