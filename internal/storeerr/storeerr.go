// Package storeerr names the cause of a store error: what a database (MySQL, MariaDB) or the
// embedded store's file system answered, in words an operator can act on. It is the one
// table of causes that the replies (handlers' errorCode), /readyz, the status page and the
// log share.
//
// A cause is transient (the store is down, unreachable or slow: retrying is right) or
// permanent (the store refuses leafd for a reason someone must fix: credentials, database,
// privilege, DSN, full disk, read-only); Class.Transient tells them apart.
//
// Classify reads the error chain first (the database driver's error types, syscall.Errno,
// net.Error, context.DeadlineExceeded) and then its text, because some errors reach their
// reader as text only (a tag's last load error, the snowflake status, the health record).
//
// The package imports no database driver, so that the segment core, which logs the cause of
// its stores' errors, links none: the MySQL driver's types are read by
// internal/storeerr/mysqlerr, which the packages that talk to MySQL import (SetDriver).
package storeerr

import (
	"context"
	"errors"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Driver reads a database driver's own error types.
type Driver struct {
	// Code returns the server error number and message of the first server error in err's
	// chain; ok is false when the chain has none.
	Code func(err error) (code int, msg string, ok bool)
	// Class names the driver's own errors in err's chain (a lost connection, an
	// authentication plugin it refused); None for any other error.
	Class func(err error) Class
}

var drv atomic.Pointer[Driver]

// SetDriver makes Classify and Describe read d's error types. A process has one database
// driver; mysqlerr sets it when imported. Without one, the driver's errors are classified by
// their text ("Error 1045 (28000): ...", "invalid connection").
func SetDriver(d Driver) { drv.Store(&d) }

// Class is the cause of a store error. The zero Class is None: not a store error leafd knows.
type Class uint8

// The classes. Their String is stable: it is the `cause` of the log, /readyz and metrics.
const (
	None        Class = iota
	Auth              // the database refused the user or password (1045, 1698, account locked, expired password)
	NoDatabase        // the database named in the DSN does not exist (1049)
	Privilege         // the account lacks a privilege (1142, 1143, 1044, 1227, 1370)
	NoTable           // a table leafd needs does not exist (1146)
	ReadOnly          // the database or file system is read-only (1290, 1836, 1792, EROFS)
	DSN               // the DSN cannot be parsed
	DiskFull          // the store's disk is full (ENOSPC, EDQUOT, 1021, 1114, errno 28)
	Refused           // the connection was refused: nothing listens at the address
	Timeout           // the store did not answer in time
	Unreachable       // the connection failed or was lost (no route, DNS, reset, server gone)
	Busy              // the database refuses more connections (1040, 1203)
)

var names = [...]string{"", "auth", "nodb", "privilege", "notable", "readonly", "dsn", "diskfull",
	"refused", "timeout", "unreachable", "busy"}

// String is the class's stable one-word name ("" for None).
func (c Class) String() string {
	if int(c) < len(names) {
		return names[c]
	}
	return ""
}

// Transient reports whether retrying without anyone's action can succeed: the store is
// down, unreachable, slow or busy. A permanent class needs a fix (Fix says which).
func (c Class) Transient() bool { return c == Refused || c == Timeout || c == Unreachable || c == Busy }

// What says what happened, in a client's words (no address, user or path).
func (c Class) What() string {
	switch c {
	case Auth:
		return "the database refused leafd's user or password"
	case NoDatabase:
		return "the database named in the DSN does not exist"
	case Privilege:
		return "the database user lacks a privilege leafd needs"
	case NoTable:
		return "a table leafd needs does not exist in the database"
	case ReadOnly:
		return "the store is read-only"
	case DSN:
		return "the MySQL DSN cannot be parsed"
	case DiskFull:
		return "the store's disk is full"
	case Refused:
		return "the store refused the connection: it is not running, or not listening at its address"
	case Timeout:
		return "the store did not answer in time"
	case Unreachable:
		return "the connection to the store failed or was lost"
	case Busy:
		return "the database refuses more connections (max_connections or max_user_connections)"
	}
	return ""
}

// Fix says what to do about a permanent class ("" for a transient one: retry).
func (c Class) Fix() string {
	switch c {
	case Auth:
		return "fix the user or password in --mysql-dsn, or the account's allowed host"
	case NoDatabase:
		return "create the database, or fix its name in --mysql-dsn"
	case Privilege:
		return "grant SELECT, INSERT, UPDATE (and CREATE for --mysql-create-table) on the database to leafd's user (docs/MYSQL.md)"
	case NoTable:
		return "create the tables (docs/MYSQL.md) or start with --mysql-create-table"
	case ReadOnly:
		return "point --mysql-dsn at the primary, or make the data dir writable"
	case DSN:
		return "write it as " + DSNForm
	case DiskFull:
		return "free space on the store's disk"
	}
	return ""
}

// DSNForm is the shape of a DSN leafd expects.
const DSNForm = "user:password@tcp(host:port)/dbname[?param=value]"

// Error is an error with its class, for errors.As. Wrap keeps the chain.
type Error struct {
	Class Class
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Describe is the one-line public description of err's cause, with the MySQL error number
// when there is one and, for a permanent class, what to fix: "" when err is no store error.
func Describe(err error) string {
	if err == nil {
		return ""
	}
	c, code := classify(err)
	return describe(c, code)
}

// DescribeText is Describe for an error kept as text.
func DescribeText(s string) string {
	c, code := classifyText(s)
	return describe(c, code)
}

func describe(c Class, code int) string {
	if c == None {
		return ""
	}
	s := c.What()
	if code > 0 {
		s += " (MySQL error " + strconv.Itoa(code) + ")"
	}
	if f := c.Fix(); f != "" {
		s += "; " + f
	}
	return s
}

// Classify returns the class of err (None when it is no store error leafd knows).
func Classify(err error) Class {
	c, _ := classify(err)
	return c
}

// ClassifyText is Classify for an error kept as text.
func ClassifyText(s string) Class {
	c, _ := classifyText(s)
	return c
}

func classify(err error) (Class, int) {
	if err == nil {
		return None, 0
	}
	d := drv.Load()
	var se *Error
	if errors.As(err, &se) {
		code := 0
		if d != nil {
			code, _, _ = d.Code(err)
		}
		return se.Class, code
	}
	if d != nil {
		if code, msg, ok := d.Code(err); ok {
			if c := byCode(code, msg); c != None {
				return c, code
			}
		}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if c := byErrno(errno); c != None {
			return c, 0
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Timeout, 0
	}
	if d != nil {
		if c := d.Class(err); c != None {
			return c, 0
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return Timeout, 0
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return Unreachable, 0
	}
	return classifyText(err.Error())
}

// mysqlErrText matches the text of a *mysql.MySQLError: "Error 1045 (28000): ...".
var mysqlErrText = regexp.MustCompile(`Error (\d{1,5})(?: \([0-9A-Z]{5}\))?: `)

func classifyText(s string) (Class, int) {
	if s == "" {
		return None, 0
	}
	if m := mysqlErrText.FindStringSubmatchIndex(s); m != nil {
		code, _ := strconv.Atoi(s[m[2]:m[3]])
		if c := byCode(code, s[m[1]:]); c != None {
			return c, code
		}
	}
	l := strings.ToLower(s)
	for _, t := range texts {
		if strings.Contains(l, t.sub) {
			return t.class, 0
		}
	}
	return None, 0
}

// texts are the texts of the errors the chain's types stand for, in the order they are
// tried (the more specific first).
var texts = []struct {
	sub   string
	class Class
}{
	{"no space left on device", DiskFull},
	{"disk quota exceeded", DiskFull},
	{"read-only file system", ReadOnly},
	{"invalid dsn", DSN},
	{"default addr for network", DSN},
	{"mysql dsn", DSN},
	{"connection refused", Refused},
	{"deadline exceeded", Timeout},
	{"i/o timeout", Timeout},
	{"timed out", Timeout},
	{"no route to host", Unreachable},
	{"network is unreachable", Unreachable},
	{"no such host", Unreachable},
	{"connection reset", Unreachable},
	{"broken pipe", Unreachable},
	{"invalid connection", Unreachable},
	{"bad connection", Unreachable},
	{"unexpected eof", Unreachable},
}

// byCode classifies a MySQL/MariaDB server error number; msg helps with the generic ones.
func byCode(code int, msg string) Class {
	switch code {
	case 1045, 1698, 1862, 1820, 3118, 4151, 1251:
		return Auth
	case 1049:
		return NoDatabase
	case 1142, 1143, 1044, 1227, 1370, 1211, 1410:
		return Privilege
	case 1146:
		return NoTable
	case 1290, 1836, 1792:
		return ReadOnly
	case 1021, 1114:
		return DiskFull
	case 3, 1030, 1026, 1034, 1016:
		// Error writing/reading a file, or an engine error: full disk when it names errno 28
		// ("Errcode: 28", "Got error 28 from storage engine").
		if l := strings.ToLower(msg); strings.Contains(l, "errcode: 28") || strings.Contains(l, "error 28 ") ||
			strings.Contains(l, "no space left") {
			return DiskFull
		}
	case 1040, 1203:
		return Busy
	case 1053, 1927, 1152, 1184:
		return Unreachable
	case 1205, 3024, 1969:
		return Timeout
	}
	return None
}

func byErrno(e syscall.Errno) Class {
	switch e {
	case syscall.ENOSPC, syscall.EDQUOT:
		return DiskFull
	case syscall.EROFS:
		return ReadOnly
	case syscall.ECONNREFUSED:
		return Refused
	case syscall.ETIMEDOUT:
		return Timeout
	case syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ECONNRESET, syscall.EPIPE, syscall.ECONNABORTED:
		return Unreachable
	}
	return None
}
