package testenv

import (
	"context"
	"database/sql/driver"
	"errors"
)

// Faults are errors a FaultConnector answers in place of the server's, as a server that
// rolled the work back would (e.g. a Galera certification conflict: Error 1213 at COMMIT).
// A nil func injects nothing.
type Faults struct {
	// Commit is asked at each COMMIT: an error rolls the transaction back and is returned
	// as COMMIT's answer.
	Commit func() error
	// Exec is asked before each statement run outside a transaction (autocommit): an error
	// is returned without running it.
	Exec func(query string) error
	// Observe, when set, is told of each call that reaches the server: "connect", "exec",
	// "query", "prepare", "begin", "commit", "rollback", with the statement when there is one
	// (counting round trips and transactions).
	Observe func(kind, query string)
}

func (f *Faults) observe(kind, query string) {
	if f.Observe != nil {
		f.Observe(kind, query)
	}
}

// FaultConnector wraps c (e.g. a go-sql-driver connector) so that the calls Faults names
// fail. Everything else goes to c's connections unchanged.
func FaultConnector(c driver.Connector, f Faults) driver.Connector {
	return &faultConnector{c: c, f: f}
}

type faultConnector struct {
	c driver.Connector
	f Faults
}

func (fc *faultConnector) Connect(ctx context.Context) (driver.Conn, error) {
	fc.f.observe("connect", "")
	c, err := fc.c.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &faultConn{c: c, f: &fc.f}, nil
}

func (fc *faultConnector) Driver() driver.Driver { return fc.c.Driver() }

type faultConn struct {
	c    driver.Conn
	f    *Faults
	inTx bool
}

var errNotSupported = errors.New("testenv: the wrapped connection does not support this")

func (c *faultConn) Prepare(q string) (driver.Stmt, error) { return c.c.Prepare(q) }
func (c *faultConn) Close() error                          { return c.c.Close() }
func (c *faultConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *faultConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	c.f.observe("prepare", q)
	if p, ok := c.c.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, q)
	}
	return c.c.Prepare(q)
}

func (c *faultConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b, ok := c.c.(driver.ConnBeginTx)
	if !ok {
		return nil, errNotSupported
	}
	c.f.observe("begin", "")
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.inTx = true
	return &faultTx{tx: tx, c: c}, nil
}

func (c *faultConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	if !c.inTx && c.f.Exec != nil {
		if err := c.f.Exec(q); err != nil {
			return nil, err
		}
	}
	e, ok := c.c.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	c.f.observe("exec", q)
	return e.ExecContext(ctx, q, args)
}

func (c *faultConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	qc, ok := c.c.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	c.f.observe("query", q)
	return qc.QueryContext(ctx, q, args)
}

func (c *faultConn) CheckNamedValue(v *driver.NamedValue) error {
	if n, ok := c.c.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (c *faultConn) ResetSession(ctx context.Context) error {
	if r, ok := c.c.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *faultConn) IsValid() bool {
	if v, ok := c.c.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

type faultTx struct {
	tx driver.Tx
	c  *faultConn
}

func (t *faultTx) Commit() error {
	t.c.inTx = false
	if t.c.f.Commit != nil {
		if err := t.c.f.Commit(); err != nil {
			_ = t.tx.Rollback()
			return err
		}
	}
	t.c.f.observe("commit", "")
	return t.tx.Commit()
}

func (t *faultTx) Rollback() error {
	t.c.inTx = false
	t.c.f.observe("rollback", "")
	return t.tx.Rollback()
}
