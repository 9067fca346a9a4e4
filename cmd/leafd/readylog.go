package main

import (
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/leafd/leafd/internal/storeerr"
	"github.com/leafd/leafd/segment"
)

// notReadyMsg is the start line in place of "leafd ready" while the segment store fails: the
// server listens (a store that comes back, or a fixed grant or password, needs no restart)
// but /readyz says 503 with the cause. "leafd ready" follows once the store answers.
const notReadyMsg = "leafd serving, not ready: the store fails"

// logStart writes the start line: "leafd ready" when the store answered its latest call (or
// segment mode is off), else notReadyMsg with the cause, at Error for a cause that needs a
// fix (credentials, database, privilege, full disk) and Warn for one that passes (refused,
// timeout). In that case it watches the store's health once a second and writes "leafd
// ready" when it answers; the returned stop ends the watch and waits for it.
func logStart(log *zap.Logger, seg *segment.Generator, segmentOn bool, fields []zap.Field) (stop func()) {
	h := seg.Health()
	if !segmentOn || h.StoreOK {
		log.Info("leafd ready", fields...)
		return func() {}
	}
	c := storeerr.ClassifyText(h.StoreError)
	lvl := zapcore.WarnLevel
	if c != storeerr.None && !c.Transient() {
		lvl = zapcore.ErrorLevel
	}
	f := append(fields[:len(fields):len(fields)], zap.String("cause", c.String()), zap.String("store_error", h.StoreError))
	if fix := c.Fix(); fix != "" {
		f = append(f, zap.String("fix", fix))
	}
	if ce := log.Check(lvl, notReadyMsg); ce != nil {
		ce.Write(f...)
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if seg.Health().StoreOK {
					log.Info("leafd ready", append(fields, zap.Bool("store_answers_again", true))...)
					return
				}
			}
		}
	}()
	return func() { close(quit); <-done }
}

// metricsMaxTags maps --metrics-max-tags (0: none) to admin.Config.MetricsMaxTags
// (0: the default, negative: none).
func metricsMaxTags(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
