// Package mysqlcluster is what leafd's MySQL stores (segment ranges, ORDERED leases,
// snowflake worker ids) know about the database behind their DSN: which database it is, so
// that a change of database (a failover) can be told from a move between the members of one
// multi-writer cluster, and which of its errors are a rollback of the whole transaction that
// may simply be run again. On a Galera cluster the identity also carries the cluster's
// generation (generation.go, History): a cluster bootstrapped again from a member that lacked
// commits keeps its state UUID but is another database.
package mysqlcluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// Kind is the kind of database behind a DSN.
type Kind int

const (
	// Server is one MySQL or MariaDB server (a primary, perhaps with replicas): its identity
	// is the server's (@@server_id, and @@server_uuid on MySQL).
	Server Kind = iota
	// Galera is a member of a MariaDB Galera or Percona XtraDB Cluster: its identity is the
	// cluster's history (wsrep_cluster_state_uuid), the same on every member.
	Galera
)

func (k Kind) String() string {
	if k == Galera {
		return "galera"
	}
	return "server"
}

const errUnknownSysVar = 1193 // ER_UNKNOWN_SYSTEM_VARIABLE: @@server_uuid on MariaDB, @@wsrep_on on MySQL

// noUUID is the state UUID of a node that belongs to no cluster yet.
const noUUID = "00000000-0000-0000-0000-000000000000"

// Ident is the SQL that reads the identity of the database a statement runs on, as select-list
// expressions evaluated by the server inside the caller's own statement (so on the member that
// runs the transaction, never on another connection's).
type Ident struct {
	Kind Kind
	// Pair is two columns: a BIGINT id and a string (leafd_fence's server_id, server_uuid).
	Pair string
	// ID is one BIGINT column (leafd_leader's server_id): on a Galera cluster 60 bits of the
	// state UUID with bit 60 set, so that it never equals a server's 32-bit @@server_id.
	ID string
	// State is one string column, the member's position (State.Scan): on a server ''.
	// A store reads it beside the identity and hands it to History.Check.
	State string

	withGen bool   // leafd_generation exists: generations can be recorded
	mysql   bool   // MySQL (Percona XtraDB Cluster), not MariaDB
	table   string // the status variables' table
}

// Detect asks the server behind db what it is. A Galera member is one with wsrep on and a
// cluster state UUID; Percona XtraDB Cluster 8 (MySQL 8) keeps its status variables in
// performance_schema, MariaDB in information_schema.
func Detect(ctx context.Context, db *sql.DB) (Ident, error) {
	var uuid string
	err := db.QueryRowContext(ctx, "SELECT @@server_uuid").Scan(&uuid)
	mysqlUUID := true
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == errUnknownSysVar:
		mysqlUUID = false
	case err != nil:
		return Ident{}, err
	}
	server := Ident{Kind: Server, Pair: "@@server_id, ''", ID: "@@server_id", State: "''"}
	if mysqlUUID {
		server.Pair = "@@server_id, @@server_uuid"
	}
	var on sql.NullInt64
	err = db.QueryRowContext(ctx, "SELECT @@global.wsrep_on").Scan(&on)
	switch {
	case errors.As(err, &me) && me.Number == errUnknownSysVar:
		return server, nil // MySQL without wsrep
	case err != nil:
		return Ident{}, err
	case on.Int64 != 1:
		return server, nil
	}
	table := "information_schema.GLOBAL_STATUS"
	if mysqlUUID {
		table = "performance_schema.global_status"
	}
	state := "(SELECT VARIABLE_VALUE FROM " + table + " WHERE VARIABLE_NAME = 'wsrep_cluster_state_uuid')"
	var v sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT "+state).Scan(&v); err != nil {
		return Ident{}, err
	}
	if !v.Valid || v.String == "" || v.String == noUUID {
		return server, nil // wsrep on, but no provider or no cluster
	}
	withGen, err := ensureGenerations(ctx, db)
	if err != nil {
		return Ident{}, err
	}
	id := galeraSQL(table, withGen)
	id.mysql, id.table = mysqlUUID, table
	return id, nil
}

const (
	errNoSuchTable    = 1146 // ER_NO_SUCH_TABLE
	errNoDatabase     = 1046 // ER_NO_DB_ERROR: a DSN without a database
	errTableAccess    = 1142 // ER_TABLEACCESS_DENIED_ERROR: no CREATE
	errReadOnly       = 1290 // ER_OPTION_PREVENTS_STATEMENT: read-only
	errSpecificDenied = 1227 // ER_SPECIFIC_ACCESS_DENIED_ERROR
)

// ensureGenerations makes sure leafd_generation exists, creating it when missing. false
// without error: it is missing and may not be created here; the identity is then the state
// UUID's alone, and a restart from a member that lacked commits is refused when found
// (History.Check) instead of being recorded.
func ensureGenerations(ctx context.Context, db *sql.DB) (bool, error) {
	var one int
	err := db.QueryRowContext(ctx, "SELECT 1 FROM leafd_generation LIMIT 1").Scan(&one)
	var me *mysql.MySQLError
	switch {
	case err == nil || errors.Is(err, sql.ErrNoRows):
		return true, nil
	case errors.As(err, &me) && me.Number == errNoDatabase:
		return false, nil
	case !errors.As(err, &me) || me.Number != errNoSuchTable:
		return false, err
	}
	_, err = db.ExecContext(ctx, mysqlCreateGeneration)
	if errors.As(err, &me) && (me.Number == errTableAccess || me.Number == errReadOnly || me.Number == errSpecificDenied) {
		return false, nil
	}
	return err == nil, err
}

// IsGalera reports whether a Pair's string column names a Galera cluster.
func IsGalera(uuid string) bool { return strings.HasPrefix(uuid, "galera:") }

// ErrNoIdentity is a Galera member's identity read as NULL inside a transaction: seen on a
// transaction aborted by a replicated one while it ran. Nothing was decided on it; Retry
// runs the transaction again (the caller rolls it back).
var ErrNoIdentity = errors.New("mysqlcluster: the database's identity read as NULL (transaction aborted meanwhile?)")

// Name is the string column of Ident.Pair, scanned: NULL is ErrNoIdentity, never a name
// (an empty one would look like another database, a failover).
type Name string

// Scan implements sql.Scanner.
func (n *Name) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		return ErrNoIdentity
	case []byte:
		*n = Name(v)
	case string:
		*n = Name(v)
	default:
		return fmt.Errorf("mysqlcluster: identity of type %T", v)
	}
	return nil
}

// ID is the BIGINT column of Ident.Pair or Ident.ID, scanned: NULL is ErrNoIdentity.
type ID int64

// Scan implements sql.Scanner.
func (id *ID) Scan(v any) error {
	if v == nil {
		return ErrNoIdentity
	}
	var n sql.NullInt64
	if err := n.Scan(v); err != nil {
		return err
	}
	*id = ID(n.Int64)
	return nil
}
