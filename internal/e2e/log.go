package e2e

// A server's log as the harness reads it: lines kept over all runs, the structured line a
// test waits for (WaitLog), and both log formats parsed.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// logWriter feeds an in-process server's log into the Leafd's log, line by line.
type logWriter struct{ l *Leafd }

func (w logWriter) Write(p []byte) (int, error) {
	for line := range bytes.SplitSeq(bytes.TrimRight(p, "\n"), []byte("\n")) {
		w.l.appendLine(line)
	}
	return len(p), nil
}

func (l *Leafd) appendLine(b []byte) {
	l.logMu.Lock()
	l.log.Write(b)
	l.log.WriteByte('\n')
	close(l.logMore)
	l.logMore = make(chan struct{})
	l.logMu.Unlock()
}

// waitReady waits for the ready line of the current run; an exit first is fatal.
func (l *Leafd) waitReady() {
	l.t.Helper()
	line, err := l.waitLine(started, StartTimeout)
	if err != nil {
		l.t.Fatalf("leafd on %s: %v\n%s", l.Addr, err, Tail(l.Log(), 40))
	}
	a, _ := line["addr"].(string)
	if strings.HasSuffix(FlagValue(l.Args, "--addr"), ":0") && a != "" {
		l.Addr = a // the port the run was given by the kernel: nothing else can take it meanwhile
	} else if a != "" && a != l.Addr {
		l.t.Fatalf("leafd ready on %s, want %s", a, l.Addr)
	}
	if strings.HasSuffix(FlagValue(l.Args, "--http-addr"), ":0") {
		if h, err := l.waitLine(func(m map[string]any) bool { return m["msg"] == "admin HTTP ready" }, StartTimeout); err == nil {
			l.HTTPAddr, _ = h["http_addr"].(string)
		}
	}
}

// WaitLog waits until the current run logs a line whose message contains msg, and returns
// that line's fields. The wait ends on the line (an event), the process's exit or timeout.
func (l *Leafd) WaitLog(msg string, timeout time.Duration) map[string]any {
	l.t.Helper()
	line, err := l.waitLine(func(m map[string]any) bool {
		s, _ := m["msg"].(string)
		return strings.Contains(s, msg)
	}, timeout)
	if err != nil {
		l.t.Fatalf("waiting for log line %q: %v\n%s", msg, err, Tail(l.Log(), 40))
	}
	return line
}

// waitLine scans the current run's JSON log lines (from its start) for one match accepts.
func (l *Leafd) waitLine(match func(map[string]any) bool, timeout time.Duration) (map[string]any, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	l.logMu.Lock()
	off := l.runFrom
	l.logMu.Unlock()
	for {
		l.logMu.Lock()
		chunk := slicesBytes(l.log.Bytes()[off:])
		more := l.logMore
		l.logMu.Unlock()
		for {
			i := bytes.IndexByte(chunk, '\n')
			if i < 0 {
				break
			}
			line := chunk[:i]
			chunk = chunk[i+1:]
			off += i + 1
			if m := parseLine(line); m != nil && match(m) {
				return m, nil
			}
		}
		select {
		case <-more:
		case <-l.exited:
			// Lines written before the exit are in the log already: look once more.
			l.logMu.Lock()
			rest := slicesBytes(l.log.Bytes()[off:])
			l.logMu.Unlock()
			for line := range bytes.SplitSeq(rest, []byte("\n")) {
				if m := parseLine(line); m != nil && match(m) {
					return m, nil
				}
			}
			return nil, fmt.Errorf("exited (%v) before the log line", l.exitErr)
		case <-deadline.C:
			return nil, fmt.Errorf("no such log line within %v", timeout)
		}
	}
}

// parseLine returns the fields of one zap log line, its message under "msg": a JSON line
// (--log-format json) or a console line (time, level, [logger,] caller, message and the
// fields as JSON, separated by tabs). Other lines (a panic, the race detector) give nil.
func parseLine(line []byte) map[string]any {
	var m map[string]any
	if bytes.HasPrefix(line, []byte("{")) {
		if json.Unmarshal(line, &m) != nil {
			return nil
		}
		return m
	}
	parts := strings.Split(string(line), "\t")
	for i, p := range parts {
		if i < 2 || !strings.Contains(p, ".go:") || i+1 >= len(parts) {
			continue
		}
		if i+2 < len(parts) && json.Unmarshal([]byte(parts[i+2]), &m) != nil {
			return nil
		}
		if m == nil {
			m = map[string]any{}
		}
		m["msg"] = parts[i+1]
		return m
	}
	return nil
}

func slicesBytes(b []byte) []byte { return append([]byte(nil), b...) }

// Log returns what the server logged so far, over all its runs.
func (l *Leafd) Log() string {
	l.logMu.Lock()
	defer l.logMu.Unlock()
	return l.log.String()
}
