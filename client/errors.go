package client

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Error is a refusal: Code is leafd's stable error code (the first word of its error reply),
// or one of the client's own (UNAVAILABLE when no address answers, CLOSED, SHAPED).
type Error struct {
	Code string
	Msg  string // the whole message, code included
}

func (e *Error) Error() string { return "leafd: " + e.Msg }

// Is matches an *Error of the same code, so errors.Is(err, client.ErrUnavailable) works on
// every UNAVAILABLE whatever its message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Sentinels to compare with errors.Is.
var (
	// ErrUnavailable: no ID can be had now (no range ready at the server, the store or every
	// address unreachable); retry later.
	ErrUnavailable = &Error{Code: "UNAVAILABLE", Msg: "UNAVAILABLE"}
	// ErrTryAgain: an ordered tag is changing leader; retry.
	ErrTryAgain = &Error{Code: "TRYAGAIN", Msg: "TRYAGAIN"}
	// ErrNoTag: the tag does not exist and the server does not create tags on first use.
	ErrNoTag = &Error{Code: "NOTAG", Msg: "NOTAG"}
	// ErrShaped: the tag has an ID shape; its IDs are strings from IDS.NEXT.
	ErrShaped = &Error{Code: "SHAPED", Msg: "SHAPED"}
	// ErrLimit: a count outside what the server or the client accepts.
	ErrLimit = &Error{Code: "LIMIT", Msg: "LIMIT"}
	// ErrClosed: the client was closed.
	ErrClosed = &Error{Code: "CLOSED", Msg: "CLOSED the client is closed"}
)

// Retryable reports whether a later call may succeed where this one failed.
func Retryable(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case "UNAVAILABLE", "TRYAGAIN", "LOADING", "CLOCKBACK", "NOWORKER":
		return true
	}
	return false
}

// replyError turns a go-redis error into an *Error; ok is false for an error that is not a
// server reply (a connection or timeout error).
func replyError(err error) (*Error, bool) {
	var re redis.Error
	if !errors.As(err, &re) {
		return nil, false
	}
	msg := err.Error()
	code, _, _ := strings.Cut(msg, " ")
	return &Error{Code: code, Msg: msg}, true
}

// failover reports whether a reply error asks for another address: this instance cannot
// serve now, another may.
func failover(e *Error) bool {
	switch e.Code {
	case "UNAVAILABLE", "LOADING", "NOWORKER", "CLOCKBACK":
		return true
	}
	return false
}
