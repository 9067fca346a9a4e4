package main

import (
	"errors"

	"github.com/leafd/leafd/snowflake"
	"go.uber.org/zap"
)

func openZKSource(cfg Config, log *zap.Logger) (snowflake.WorkerSource, error) {
	return nil, errors.New("zookeeper worker source: not wired yet")
}
