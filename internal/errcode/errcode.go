// Package errcode is the table of leafd's error codes: every refusal's first word, the HTTP
// status Leaf's HTTP API and the admin endpoints answer it with, and its series of
// leafd_command_errors_total. The RESP replies (handlers.errorCode), the HTTP replies (admin)
// and the metrics read this table only, so a code is added in one place.
package errcode

import "sync/atomic"

// HTTP statuses of the table (net/http's values; the RESP side does not import net/http).
const (
	statusBadRequest     = 400
	statusUnauthorized   = 401
	statusForbidden      = 403
	statusNotFound       = 404
	statusConflict       = 409
	statusInternal       = 500
	statusNotImplemented = 501
	statusUnavailable    = 503
)

// Code is one error code.
type Code struct {
	// Name is the reply's first word (RESP: "-NAME message"; HTTP: {"code": "NAME"}) and the
	// code label of its leafd_command_errors_total series.
	Name string
	// HTTP is the status of an HTTP reply with this code.
	HTTP int
	// RetryAfter: an HTTP reply carries "Retry-After: 1" (the condition passes by itself).
	RetryAfter bool
}

// Table lists every code the server sends; README.md's error-code table has a row for each.
var Table = [...]Code{
	{Name: "ERR", HTTP: statusBadRequest}, // Redis's generic errors; "ERR internal error" is a 500 (Status)
	{Name: "NOTAG", HTTP: statusNotFound},
	{Name: "TAGEXISTS", HTTP: statusConflict},
	{Name: "BADTAG", HTTP: statusBadRequest},
	{Name: "UNAVAILABLE", HTTP: statusUnavailable, RetryAfter: true},
	{Name: "REGRESSION", HTTP: statusConflict},
	{Name: "LIMIT", HTTP: statusBadRequest},
	{Name: "CLOCKBACK", HTTP: statusUnavailable, RetryAfter: true},
	{Name: "NOWORKER", HTTP: statusUnavailable, RetryAfter: true},
	{Name: "OVERFLOW", HTTP: statusInternal},
	{Name: "NOPERM", HTTP: statusForbidden},
	{Name: "NOPROTO", HTTP: statusBadRequest},
	{Name: "WRONGPASS", HTTP: statusUnauthorized},
	{Name: "NOTADOPTED", HTTP: statusConflict},
	{Name: "DISABLED", HTTP: statusNotImplemented},
	{Name: "STORE", HTTP: statusUnavailable}, // waits for someone to fix the store: no Retry-After
	{Name: "TRYAGAIN", HTTP: statusUnavailable, RetryAfter: true},
	{Name: "LEADER", HTTP: statusUnavailable},
	{Name: "SHAPED", HTTP: statusBadRequest},
	{Name: "NOSHAPE", HTTP: statusBadRequest},
	{Name: "BADFORMAT", HTTP: statusBadRequest},
	{Name: "BADID", HTTP: statusBadRequest},
	{Name: "NOKEY", HTTP: statusUnavailable, RetryAfter: true},
	{Name: "EXECABORT", HTTP: statusBadRequest},
	{Name: "NOAUTH", HTTP: statusUnauthorized},
	{Name: "NOCACHE", HTTP: statusBadRequest},
}

// MsgInternal is the message of an error the server does not know (code ERR): the detail is
// in the log.
const MsgInternal = "internal error"

// Other is the metric label of a code missing from Table (TestTableCoversSource keeps it at
// zero).
const Other = "other"

// Index returns the position of name in Table, or len(Table) when it is not there.
func Index(name string) int {
	for i := range Table {
		if Table[i].Name == name {
			return i
		}
	}
	return len(Table)
}

// Status is the HTTP status of a reply with code name and message msg: the table's, but 500
// for "ERR internal error" and for a code missing from the table.
func Status(name, msg string) (status int, retryAfter bool) {
	i := Index(name)
	if i == len(Table) || name == "ERR" && msg == MsgInternal {
		return statusInternal, false
	}
	return Table[i].HTTP, Table[i].RetryAfter
}

// Counts counts replies by code; safe for concurrent use. Only error paths touch it.
type Counts struct {
	n [len(Table) + 1]atomic.Uint64 // the last one: Other
}

// Add counts one reply with code name.
func (c *Counts) Add(name string) { c.n[Index(name)].Add(1) }

// Each calls f with every code of Table (its metric label) and its count, then Other.
func (c *Counts) Each(f func(label string, n uint64)) {
	for i := range Table {
		f(Table[i].Name, c.n[i].Load())
	}
	f(Other, c.n[len(Table)].Load())
}
