// Package mysqlerr reads the MySQL driver's error types for internal/storeerr: importing it
// makes storeerr.Classify and storeerr.Describe name the cause of a *mysql.MySQLError by its
// server error number and of the driver's own errors (a lost connection, a refused
// authentication plugin). It also parses DSNs with an error that shows the expected form.
// The packages that talk to MySQL import it; the segment core does not.
package mysqlerr

import (
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/internal/storeerr"
)

func init() {
	storeerr.SetDriver(storeerr.Driver{Code: code, Class: class})
}

// code is the number and message of the first *mysql.MySQLError in err's chain.
func code(err error) (int, string, bool) {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return int(me.Number), me.Message, true
	}
	return 0, "", false
}

// class names the driver's sentinel errors.
func class(err error) storeerr.Class {
	switch {
	case errors.Is(err, mysql.ErrInvalidConn), errors.Is(err, driver.ErrBadConn):
		return storeerr.Unreachable
	case errors.Is(err, mysql.ErrNativePassword), errors.Is(err, mysql.ErrCleartextPassword),
		errors.Is(err, mysql.ErrOldPassword), errors.Is(err, mysql.ErrUnknownPlugin):
		return storeerr.Auth
	}
	return storeerr.None
}

// ParseDSN is mysql.ParseDSN whose error is a DSN storeerr.Error that shows the expected form
// (the driver's own text, e.g. "default addr for network 'db:3306' unknown" for a DSN
// without tcp(...), does not say what it wants).
func ParseDSN(dsn string) (*mysql.Config, error) {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, &storeerr.Error{Class: storeerr.DSN, Err: fmt.Errorf("mysql DSN: %w; write it as %s", err, storeerr.DSNForm)}
	}
	return c, nil
}
