package handlers

import "sync/atomic"

// errorCodes are the codes errorCode returns; leafd_command_errors_total has one series each.
var errorCodes = [...]string{"ERR", "NOTAG", "TAGEXISTS", "BADTAG", "UNAVAILABLE", "REGRESSION",
	"LIMIT", "CLOCKBACK", "NOWORKER", "OVERFLOW", "NOPERM", "NOPROTO", "WRONGPASS",
	"NOTADOPTED", "DISABLED", "STORE"}

// errorCounts counts the error replies of commands (RESP and HTTP) by code. Only error paths
// touch it.
type errorCounts struct {
	n [len(errorCodes) + 1]atomic.Uint64 // the last one: any other code
}

func (e *errorCounts) add(code string) {
	for i, c := range errorCodes {
		if c == code {
			e.n[i].Add(1)
			return
		}
	}
	e.n[len(errorCodes)].Add(1)
}

// each calls f with every code (and "other") and its count.
func (e *errorCounts) each(f func(code string, n uint64)) {
	for i, c := range errorCodes {
		f(c, e.n[i].Load())
	}
	f("other", e.n[len(errorCodes)].Load())
}
