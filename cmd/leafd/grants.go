package main

// The MySQL privileges of the admin tools (docs/MYSQL.md, "Grants"): adopt checks each one it
// uses before it starts, with statements that read or change nothing, so that a user without
// one learns which GRANT to ask for instead of a failure halfway through.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/leafd/leafd/segment/mysqlstore"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MySQL and MariaDB error numbers of a missing privilege.
const (
	errDBAccessDenied       = 1044 // ER_DBACCESS_DENIED_ERROR
	errTableAccessDenied    = 1142 // ER_TABLEACCESS_DENIED_ERROR
	errColumnAccessDenied   = 1143 // ER_COLUMNACCESS_DENIED_ERROR
	errSpecificAccessDenied = 1227 // ER_SPECIFIC_ACCESS_DENIED_ERROR: SUPER, SLAVE MONITOR, ...
	errParse                = 1064 // SHOW ALL SLAVES STATUS on MySQL
)

// deniedPrivilege reports whether err is a missing privilege (not a failed login).
func deniedPrivilege(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case errDBAccessDenied, errTableAccessDenied, errColumnAccessDenied, errSpecificAccessDenied:
		return true
	}
	return false
}

// replicaStatusGrant is the privilege SHOW REPLICA STATUS needs, by server.
const replicaStatusGrant = "SLAVE MONITOR ON *.* (MariaDB 10.5.9 and later; SUPER on earlier MariaDB; REPLICATION CLIENT on MySQL)"

// grantProbe is one privilege a tool uses: a statement that needs it and changes nothing.
type grantProbe struct {
	what  string // what the tool does with it
	query string
	grant string // the GRANT's privilege and object; %s is the database
}

// checkAdoptGrants runs adopt's probes: the replication status (adopt refuses a replica),
// reading leaf_alloc and leafd_fence and, unless dryRun, locking leaf_alloc rows, creating
// leafd_fence and writing it. The first missing privilege is an error naming the GRANT.
func checkAdoptGrants(ctx context.Context, dsn string, dryRun bool, timeout time.Duration) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var user, dbName string
	if err := db.QueryRowContext(ctx, "SELECT CURRENT_USER(), COALESCE(DATABASE(), '')").Scan(&user, &dbName); err != nil {
		return fmt.Errorf("check the grants: %w", err)
	}
	var fence int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'leafd_fence'").Scan(&fence); err != nil {
		return fmt.Errorf("check the grants: %w", err)
	}
	probes := []grantProbe{
		{"read the replication status (adopt refuses a replica)", "SHOW ALL SLAVES STATUS", replicaStatusGrant},
		{"read leaf_alloc", "SELECT biz_tag, max_id, step FROM leaf_alloc WHERE 1 = 0", "SELECT ON `%s`.`leaf_alloc`"},
	}
	if fence > 0 {
		probes = append(probes, grantProbe{"read leafd_fence", "SELECT biz_tag, max_end FROM leafd_fence WHERE 1 = 0", "SELECT ON `%s`.`leafd_fence`"})
	}
	if !dryRun {
		probes = append(probes,
			grantProbe{"lock leaf_alloc rows (SELECT ... FOR UPDATE)", "SELECT max_id FROM leaf_alloc WHERE 1 = 0 FOR UPDATE", "UPDATE ON `%s`.`leaf_alloc`"},
			// The table's own DDL: a no-op where it exists, else the creation adopt makes anyway.
			grantProbe{"create leafd_fence (CREATE TABLE IF NOT EXISTS)", mysqlstore.FenceTableDDL(), "CREATE ON `%s`.`leafd_fence`"})
		if fence > 0 {
			probes = append(probes,
				grantProbe{"write leafd_fence rows", "INSERT INTO leafd_fence (biz_tag, server_id, epoch, token) SELECT biz_tag, 0, 0, 0 FROM leaf_alloc WHERE 1 = 0", "INSERT ON `%s`.`leafd_fence`"},
				grantProbe{"update leafd_fence rows", "UPDATE leafd_fence SET gap = gap WHERE 1 = 0", "UPDATE ON `%s`.`leafd_fence`"})
		}
	}
	for _, p := range probes {
		err := probeGrant(ctx, db, p.query)
		if err == nil {
			continue
		}
		if deniedPrivilege(err) {
			return fmt.Errorf("the MySQL user %s may not %s: GRANT %s TO %s; (%v)", user, p.what, grantObject(p.grant, dbName), quoteUser(user), err)
		}
		return fmt.Errorf("check the grants (%s): %w", p.what, err)
	}
	return nil
}

// probeGrant runs q and reads nothing; the replication status falls back to the statements
// of servers without SHOW ALL SLAVES STATUS (MySQL).
func probeGrant(ctx context.Context, db *sql.DB, q string) error {
	queries := []string{q}
	if q == "SHOW ALL SLAVES STATUS" {
		queries = append(queries, "SHOW REPLICA STATUS", "SHOW SLAVE STATUS")
	}
	var err error
	for _, q := range queries {
		var rows *sql.Rows
		if strings.HasPrefix(q, "CREATE") {
			_, err = db.ExecContext(ctx, q)
			return err
		}
		rows, err = db.QueryContext(ctx, q)
		if err == nil {
			return rows.Close()
		}
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != errParse {
			return err
		}
	}
	return err
}

// withGrant adds the GRANT to ask for to an error of a missing privilege (the CREATE of
// leafd_fence, found only when adopt creates it).
func withGrant(ctx context.Context, dsn string, err error) error {
	if !deniedPrivilege(err) {
		return err
	}
	user, dbName := "the MySQL user", ""
	if db, oerr := sql.Open("mysql", dsn); oerr == nil {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_ = db.QueryRowContext(qctx, "SELECT CURRENT_USER(), COALESCE(DATABASE(), '')").Scan(&user, &dbName)
		cancel()
		_ = db.Close()
	}
	grant := "CREATE, SELECT, INSERT, UPDATE ON `%s`.*"
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == errSpecificAccessDenied {
		grant = replicaStatusGrant
	}
	return fmt.Errorf("%w: GRANT %s TO %s", err, grantObject(grant, dbName), quoteUser(user))
}

// grantObject fills the database into a grant's object.
func grantObject(grant, dbName string) string {
	if !strings.Contains(grant, "%s") {
		return grant
	}
	if dbName == "" {
		dbName = "<database>"
	}
	return fmt.Sprintf(grant, strings.ReplaceAll(dbName, "`", "``"))
}

// quoteUser turns CURRENT_USER()'s user@host into 'user'@'host'.
func quoteUser(u string) string {
	i := strings.LastIndexByte(u, '@')
	if i < 0 {
		return u
	}
	return "'" + u[:i] + "'@'" + u[i+1:] + "'"
}
