package mysqlerr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/storeerr"
)

func TestClassify(t *testing.T) {
	myErr := func(n uint16, msg string) error {
		return fmt.Errorf("segment: mysql allocate \"t\": %w", &mysql.MySQLError{Number: n, Message: msg})
	}
	_, dsnErr := mysql.ParseDSN("leaf:pw@db:3306/leaf")
	tests := []struct {
		name      string
		err       error
		want      storeerr.Class
		transient bool
	}{
		{"wrong password", myErr(1045, "Access denied for user 'leaf'@'h' (using password: YES)"), storeerr.Auth, false},
		{"unknown database", myErr(1049, "Unknown database 'leaf'"), storeerr.NoDatabase, false},
		{"table privilege revoked", myErr(1142, "UPDATE command denied to user"), storeerr.Privilege, false},
		{"database privilege", myErr(1044, "Access denied for user 'leaf'@'%' to database 'x'"), storeerr.Privilege, false},
		{"super needed", myErr(1227, "Access denied; you need (at least one of) the SUPER privilege(s)"), storeerr.Privilege, false},
		{"no table", myErr(1146, "Table 'leaf.leaf_alloc' doesn't exist"), storeerr.NoTable, false},
		{"read only", myErr(1290, "The MariaDB server is running with the --read-only option"), storeerr.ReadOnly, false},
		{"mysql disk full", myErr(1021, "Disk full (/tmp); waiting for someone to free some space"), storeerr.DiskFull, false},
		{"table full", myErr(1114, "The table 'leaf_alloc' is full"), storeerr.DiskFull, false},
		{"write errno 28", myErr(3, "Error writing file './binlog.000001' (Errcode: 28 \"No space left on device\")"), storeerr.DiskFull, false},
		{"write other errno", myErr(3, "Error writing file 'x' (Errcode: 13 \"Permission denied\")"), storeerr.None, false},
		{"engine errno 28", myErr(1030, "Got error 28 \"No space left on device\" from storage engine InnoDB"), storeerr.DiskFull, false},
		{"too many connections", myErr(1040, "Too many connections"), storeerr.Busy, true},
		{"lock wait", myErr(1205, "Lock wait timeout exceeded"), storeerr.Timeout, true},
		{"dsn without tcp()", fmt.Errorf("segment: mysql DSN: %w", dsnErr), storeerr.DSN, false},
		{"bolt ENOSPC", fmt.Errorf("raise mark: %w", &os.PathError{Op: "write", Path: "/d/marks.db", Err: syscall.ENOSPC}), storeerr.DiskFull, false},
		{"read-only fs", &os.PathError{Op: "open", Path: "/d/leafd.db", Err: syscall.EROFS}, storeerr.ReadOnly, false},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}, storeerr.Refused, true},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}, storeerr.Unreachable, true},
		{"deadline", fmt.Errorf("allocate: %w", context.DeadlineExceeded), storeerr.Timeout, true},
		{"bad conn", fmt.Errorf("x: %w", mysql.ErrInvalidConn), storeerr.Unreachable, true},
		{"dns", &net.DNSError{Err: "no such host", Name: "db"}, storeerr.Unreachable, true},
		{"classified wrapper", &storeerr.Error{Class: storeerr.Refused, Err: errors.New("x")}, storeerr.Refused, true},
		{"text only: 1045", errors.New("mysql: create table leafd_worker: Error 1045 (28000): Access denied"), storeerr.Auth, false},
		{"text only: ENOSPC", errors.New("write state: no space left on device"), storeerr.DiskFull, false},
		{"text only: refused", errors.New("dial tcp 127.0.0.1:3306: connect: connection refused"), storeerr.Refused, true},
		{"not a store error", errors.New("segment: tag exists"), storeerr.None, false},
		{"nil", nil, storeerr.None, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := storeerr.Classify(tc.err)
			if got != tc.want {
				t.Fatalf("storeerr.Classify(%v) = %q, want %q", tc.err, got, tc.want)
			}
			if got.Transient() != tc.transient {
				t.Errorf("%q.Transient() = %v, want %v", got, got.Transient(), tc.transient)
			}
			if tc.err != nil {
				if tt := storeerr.ClassifyText(tc.err.Error()); tt != tc.want && tc.name != "classified wrapper" {
					t.Errorf("storeerr.ClassifyText(%q) = %q, want %q (the text alone names the same cause)", tc.err.Error(), tt, tc.want)
				}
			}
			d := storeerr.Describe(tc.err)
			if (d == "") != (tc.want == storeerr.None) {
				t.Errorf("storeerr.Describe = %q for class %q", d, tc.want)
			}
			if tc.want != storeerr.None && !tc.want.Transient() && !strings.Contains(d, tc.want.Fix()) {
				t.Errorf("storeerr.Describe = %q, want the fix %q", d, tc.want.Fix())
			}
		})
	}
}

// TestDescribe: the number of a MySQL error is named, the user and host are not.
func TestDescribe(t *testing.T) {
	err := fmt.Errorf("x: %w", &mysql.MySQLError{Number: 1045, Message: "Access denied for user 'leaf'@'10.1.2.3'"})
	d := storeerr.Describe(err)
	if !strings.Contains(d, "MySQL error 1045") || strings.Contains(d, "10.1.2.3") || strings.Contains(d, "leaf'") {
		t.Errorf("storeerr.Describe = %q, want the number, not the user or host", d)
	}
	if got := storeerr.DescribeText("dial tcp 10.1.2.3:3306: connect: connection refused"); strings.Contains(got, "10.1.2.3") || got == "" {
		t.Errorf("storeerr.DescribeText = %q", got)
	}
	if !strings.Contains(storeerr.Describe(&storeerr.Error{Class: storeerr.DSN, Err: errors.New("bad")}), storeerr.DSNForm) {
		t.Error("a storeerr.DSN error does not show the expected form")
	}
	for c := storeerr.None + 1; c <= storeerr.Busy; c++ {
		if c.String() == "" || c.What() == "" || (c.Fix() == "") != c.Transient() {
			t.Errorf("class %d: name %q, what %q, fix %q, transient %v", c, c.String(), c.What(), c.Fix(), c.Transient())
		}
	}
}

// TestDriverTypes: what only the driver's types tell (the text alone does not): an
// authentication plugin the driver refused, and the server error number of an error that
// leafd already classified.
func TestDriverTypes(t *testing.T) {
	if got := storeerr.Classify(fmt.Errorf("connect: %w", mysql.ErrNativePassword)); got != storeerr.Auth {
		t.Errorf("ErrNativePassword: %q, want auth", got)
	}
	if got := storeerr.ClassifyText(mysql.ErrNativePassword.Error()); got == storeerr.Auth {
		t.Fatal("the text alone names the refused plugin: this test no longer shows the driver's part")
	}
	wrapped := &storeerr.Error{Class: storeerr.Auth, Err: &mysql.MySQLError{Number: 1045, Message: "Access denied"}}
	if d := storeerr.Describe(wrapped); !strings.Contains(d, "MySQL error 1045") {
		t.Errorf("Describe = %q, want the server's error number", d)
	}
	if _, err := ParseDSN("leaf:pw@db:3306/leaf"); storeerr.Classify(err) != storeerr.DSN ||
		!strings.Contains(err.Error(), storeerr.DSNForm) {
		t.Errorf("ParseDSN of a DSN without tcp(): %v", err)
	}
}
