package mysqlcluster

// Generations of a Galera cluster. A cluster bootstrapped again (galera_new_cluster,
// --wsrep-new-cluster) from a member that lacks commits keeps its state UUID and continues
// from that member's lower sequence number (wsrep_last_committed): the commits it lacks are
// lost, and the identity alone (the state UUID) would not show it. So every identity check
// also reads the member's sequence number; a process that saw seqno S of a cluster and later
// sees a lower one (confirmed by a causal read on a Synced member) begins a new generation:
// it records it in the cluster's leafd_generation table, and the identity every store
// evaluates (Ident.Pair, Ident.ID) includes the generation, so each store sees another
// database, as after a failover of a single server — the fence jump, the lease settle — on
// every instance, not only on the one that noticed. History keeps, per state UUID, the
// highest seqno seen and the generation, in memory and in a file of the data dir, so that an
// instance restarted after the bootstrap notices it too.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Synced is wsrep_local_state of a member in the primary component that has applied what it
// received: the only state whose sequence number is compared with one seen before.
const Synced = 4

// mysqlCreateGeneration is the table of the cluster's generations: one row per state UUID,
// written when an instance finds the cluster's sequence number below one it saw.
const mysqlCreateGeneration = "CREATE TABLE IF NOT EXISTS `leafd_generation` (\n" +
	"  `state_uuid` char(36) NOT NULL COMMENT 'wsrep_cluster_state_uuid',\n" +
	"  `gen` bigint NOT NULL COMMENT 'grows by one each time the cluster is found restarted from a member that lacked commits',\n" +
	"  `seqno` bigint NOT NULL COMMENT 'wsrep_last_committed when the generation began',\n" +
	"  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,\n" +
	"  PRIMARY KEY (`state_uuid`)\n" +
	") ENGINE=InnoDB"

// GenerationTableDDL is the DDL of leafd_generation (docs/MYSQL.md, a check of grants).
func GenerationTableDDL() string { return mysqlCreateGeneration }

// ErrGeneration is an identity read under a generation of the Galera cluster that is no
// longer the current one (the caller's transaction began before the new generation was
// recorded, or on a member that had not applied it yet). Nothing was decided on it: Retry
// runs the transaction again, which reads the new identity.
var ErrGeneration = errors.New("mysqlcluster: the Galera cluster began a new generation (restarted from a member that lacked commits); the transaction runs again")

// ErrNotSynced is a member whose sequence number is below one seen before and that is not
// Synced, or whose check could not be made on a Synced member: lag or lost commits, which
// cannot be told apart there. The caller fails its call (retried later); nothing is decided on
// such a member.
var ErrNotSynced = errors.New("mysqlcluster: the Galera member's sequence number is below one seen before and no Synced member confirms it")

// State is one reading of a member's position in its cluster: the string column of
// Ident.State, scanned. A zero UUID is a single server (nothing to check).
type State struct {
	UUID  string // wsrep_cluster_state_uuid
	Seqno int64  // wsrep_last_committed
	Local int64  // wsrep_local_state (Synced: 4)
	Gen   int64  // leafd_generation.gen of UUID (0: none)
}

// Scan implements sql.Scanner: "uuid seqno local gen", or "" on a single server. NULL is
// ErrNoIdentity (a transaction aborted meanwhile), retried.
func (s *State) Scan(v any) error {
	var str string
	switch v := v.(type) {
	case nil:
		return ErrNoIdentity
	case []byte:
		str = string(v)
	case string:
		str = v
	default:
		return fmt.Errorf("mysqlcluster: state of type %T", v)
	}
	*s = State{}
	if str == "" {
		return nil
	}
	f := strings.Fields(str)
	if len(f) != 4 {
		return fmt.Errorf("mysqlcluster: state %q: want uuid seqno local_state gen", str)
	}
	s.UUID = f[0]
	for i, p := range []*int64{&s.Seqno, &s.Local, &s.Gen} {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return fmt.Errorf("mysqlcluster: state %q: %w", str, err)
		}
		*p = n
	}
	return nil
}

// galeraSQL builds the Galera member's identity from the status table's name: state is
// wsrep_cluster_state_uuid; gen the generation's expression (a literal 0 without the table).
func galeraSQL(table string, withGen bool) Ident {
	status := func(name string) string {
		return "(SELECT VARIABLE_VALUE FROM " + table + " WHERE VARIABLE_NAME = '" + name + "')"
	}
	state := status("wsrep_cluster_state_uuid")
	gen := "0"
	if withGen {
		gen = "COALESCE((SELECT gen FROM leafd_generation WHERE state_uuid = " + state + "), 0)"
	}
	// Generation 0 is the identity of a cluster never found restarted; generation g > 0
	// changes the 60 bits by g·1000003 (exclusive or: distinct for distinct g below 2^40)
	// and appends "/g" to the name.
	id := "((CAST(CONV(SUBSTRING(REPLACE(" + state + ", '-', ''), 1, 15), 16, 10) AS SIGNED) ^ (" + gen + " * 1000003)) | 1152921504606846976)"
	name := "CONCAT('galera:', " + state + ", IF(" + gen + " = 0, '', CONCAT('/', " + gen + ")))"
	return Ident{
		Kind:    Galera,
		Pair:    id + ", " + name,
		ID:      id,
		State:   "CONCAT(" + state + ", ' ', " + status("wsrep_last_committed") + ", ' ', " + status("wsrep_local_state") + ", ' ', " + gen + ")",
		withGen: withGen,
	}
}

// Source is where History.Check confirms a lower reading and records a new generation: the
// database behind the caller's pool (Ident.On), or a fake in tests.
type Source interface {
	// Confirm reads the member's state again after a causal wait: a member that only lags
	// then shows at least every seqno any process saw before.
	Confirm(ctx context.Context) (State, error)
	// Begin records generation gen of cluster uuid, begun at seqno, for every instance; it
	// never lowers a recorded generation.
	Begin(ctx context.Context, uuid string, gen, seqno int64) error
}

// Querier is what Ident.On reads and writes through: *sql.DB (fresh autocommit statements,
// not the caller's transaction, whose snapshot may predate a new generation).
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// On is the Source of the database behind db, whose identity is id.
func (id Ident) On(db Querier) Source { return dbSource{id, db} }

type dbSource struct {
	id Ident
	db Querier
}

// Confirm is a causal read (wsrep_sync_wait = 1 for the one statement).
func (s dbSource) Confirm(ctx context.Context) (State, error) {
	var st State
	q := "SET STATEMENT wsrep_sync_wait = 1 FOR SELECT " + s.id.State
	if s.id.mysql { // Percona XtraDB Cluster: MySQL 8's hint for a statement's variable
		q = "SELECT /*+ SET_VAR(wsrep_sync_wait = 1) */ " + s.id.State
	}
	err := s.db.QueryRowContext(ctx, q).Scan(&st)
	return st, err
}

// Begin writes the row of leafd_generation, only on a member of cluster uuid.
func (s dbSource) Begin(ctx context.Context, uuid string, gen, seqno int64) error {
	if !s.id.withGen {
		return errors.New("leafd_generation, which records it for every instance, is missing and may not be created here: create it (docs/MYSQL.md, \"Multi-writer clusters\"); refusing meanwhile")
	}
	state := "(SELECT VARIABLE_VALUE FROM " + s.id.table + " WHERE VARIABLE_NAME = 'wsrep_cluster_state_uuid')"
	return Retry(ctx, nil, func(ctx context.Context) error {
		_, err := s.db.ExecContext(ctx, "INSERT INTO leafd_generation (state_uuid, gen, seqno) SELECT ?, ?, ? FROM DUAL WHERE "+state+" = ?"+
			" ON DUPLICATE KEY UPDATE seqno = IF(VALUES(gen) > gen, VALUES(seqno), seqno), gen = GREATEST(gen, VALUES(gen))",
			uuid, gen, seqno, uuid)
		return err
	})
}
