package main

// The data dir's store record (<data-dir>/store.json): which store the data dir served, so
// that a start on another one is refused rather than served (docs/OPERATIONS.md, "Which
// store a data dir serves"). A misspelled or missing DSN would otherwise start the data dir
// of a MySQL instance on a new embedded store, issuing from 1 the IDs the database issued.
//
// A MySQL database is known by its own identity, a row of leafd_identity written once with a
// random UUID: it replicates with the data, so a promoted replica, a Galera member or the
// same database behind another address is the same database, and an empty database at the
// old address is not. The DSN's host:port/db is recorded beside it, for the messages and for
// a start while the database does not answer.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
)

// storeRecord is the content of store.json.
type storeRecord struct {
	Store    string `json:"store"`                 // "embedded" or "mysql"
	Address  string `json:"address,omitempty"`     // MySQL: host:port/db of the DSN, no credentials
	Database string `json:"database_id,omitempty"` // MySQL: the UUID of leafd_identity; "" unknown
}

func (r storeRecord) String() string {
	if r.Store != "mysql" {
		return "the embedded store"
	}
	s := "the MySQL database " + r.Address
	if r.Address == "" {
		s = "a MySQL database"
	}
	if r.Database != "" {
		s += " (leafd_identity " + r.Database + ")"
	}
	return s
}

const storeRecordFile = "store.json"

// errOtherStore is the refusal of a start on a store the data dir did not serve.
var errOtherStore = errors.New("the data dir served another store")

// recordedStore reads the data dir's record. A data dir without one is inferred from its
// files: leafd.db is the embedded store; marks.db alone a MySQL database, unknown which. A
// fresh data dir has none (ok false).
func recordedStore(dataDir string) (rec storeRecord, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dataDir, storeRecordFile))
	if err == nil {
		if err := json.Unmarshal(b, &rec); err != nil || (rec.Store != "embedded" && rec.Store != "mysql") {
			return rec, false, fmt.Errorf("%s: not a store record (%v); restore it or remove it to start as a fresh data dir", filepath.Join(dataDir, storeRecordFile), err)
		}
		return rec, true, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return rec, false, err
	}
	exists := func(name string) bool { _, err := os.Stat(filepath.Join(dataDir, name)); return err == nil }
	switch {
	case exists("leafd.db"):
		return storeRecord{Store: "embedded"}, true, nil
	case exists("marks.db"):
		return storeRecord{Store: "mysql"}, true, nil
	}
	return rec, false, nil
}

// writeStoreRecord replaces the record durably (a temporary file renamed over it).
func writeStoreRecord(dataDir string, rec storeRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	path := filepath.Join(dataDir, storeRecordFile)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(dataDir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// dsnAddress is host:port/db of a DSN (no user, no password).
func dsnAddress(dsn string) (string, error) {
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", err
	}
	addr := mc.Addr
	if mc.Net != "tcp" {
		addr = mc.Net + "(" + mc.Addr + ")"
	}
	return addr + "/" + mc.DBName, nil
}

// checkStore compares the store cfg selects with the data dir's record and returns the
// record to write once the store is open. A start on another store is errOtherStore, unless
// --switch-store; a fresh data dir takes any store.
func checkStore(ctx context.Context, cfg Config, log *zap.Logger) (storeRecord, error) {
	want := storeRecord{Store: "embedded"}
	if cfg.MySQLDSN != "" {
		addr, err := dsnAddress(cfg.MySQLDSN)
		if err != nil {
			return want, fmt.Errorf("--mysql-dsn: %w (the form is user:password@tcp(host:port)/database)", err)
		}
		want = storeRecord{Store: "mysql", Address: addr}
	}
	had, ok, err := recordedStore(cfg.DataDir)
	if err != nil {
		return want, err
	}
	var idErr error
	if want.Store == "mysql" {
		want.Database, idErr = databaseID(ctx, cfg)
	}
	refuse := func(why string) (storeRecord, error) {
		if cfg.SwitchStore {
			log.Warn("data dir: serving another store (--switch-store); its regression marks stay, so a tag whose store is below them answers REGRESSION until raised (leafd raise-max-id)",
				zap.String("data_dir", cfg.DataDir), zap.String("served", had.String()), zap.String("now", want.String()), zap.String("why", why))
			return want, nil
		}
		return want, fmt.Errorf("%w: %s served %s, and this start names %s (%s); start it with the store it served, or with --switch-store to serve the new one from this data dir (its marks stay: docs/OPERATIONS.md)",
			errOtherStore, cfg.DataDir, had, want, why)
	}
	switch {
	case !ok:
		return want, nil // a fresh data dir
	case had.Store == "embedded" && want.Store == "mysql":
		return refuse("the embedded store, not MySQL")
	case had.Store == "mysql" && want.Store == "embedded":
		return refuse("no --mysql-dsn: a MySQL data dir started without its DSN")
	case had.Store == "embedded":
		return want, nil
	}
	// Both MySQL: the database's own identity decides; without it, the address.
	switch {
	case idErr != nil && had.Address != "" && had.Address != want.Address:
		return refuse(fmt.Sprintf("another address, and the database cannot say whether it is the same one: %v", idErr))
	case idErr != nil:
		log.Warn("data dir: the database's identity could not be read; the address is the one recorded, the identity is checked at the next start",
			zap.String("address", want.Address), zap.Error(idErr))
		want.Database = had.Database
	case had.Database != "" && want.Database != "" && had.Database != want.Database:
		return refuse("another database: its leafd_identity differs")
	case had.Database != "" && want.Database == "":
		return refuse("a database without the leafd_identity row the served one has")
	case had.Address != "" && had.Address != want.Address:
		log.Info("data dir: the same database at another address (a failover or a new proxy)",
			zap.String("was", had.Address), zap.String("now", want.Address), zap.String("database_id", want.Database))
	}
	if want.Database == "" {
		want.Database = had.Database
	}
	return want, nil
}

// mysqlCreateIdentity is the table of the database's identity: one row, written once.
const mysqlCreateIdentity = "CREATE TABLE IF NOT EXISTS `leafd_identity` (\n" +
	"  `id` tinyint NOT NULL COMMENT 'always 1',\n" +
	"  `uuid` char(36) NOT NULL COMMENT 'random, written once: this database, on every replica',\n" +
	"  `created` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,\n" +
	"  PRIMARY KEY (`id`)\n" +
	") ENGINE=InnoDB"

const errNoSuchTable = 1146 // ER_NO_SUCH_TABLE

// databaseID reads the database's identity, writing it first when the database has none
// (and --mysql-create-table lets leafd create tables). "" without error: the table is
// missing and may not be created, or the server is read-only before anyone wrote it.
func databaseID(ctx context.Context, cfg Config) (string, error) {
	db, err := sql.Open("mysql", cfg.MySQLDSN)
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, max(cfg.LoadTimeout, 2*time.Second))
	defer cancel()
	read := func() (string, error) {
		var id string
		err := db.QueryRowContext(ctx, "SELECT uuid FROM leafd_identity WHERE id = 1").Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return "", nil
		}
		return id, err
	}
	id, err := read()
	var me *mysql.MySQLError
	missing := errors.As(err, &me) && me.Number == errNoSuchTable
	if (err == nil && id != "") || (err != nil && !missing) {
		return id, err
	}
	if missing && !cfg.MySQLCreate {
		return "", nil
	}
	if missing {
		if _, err := db.ExecContext(ctx, mysqlCreateIdentity); err != nil {
			return "", fmt.Errorf("create leafd_identity: %w", err)
		}
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80 // a version 4 UUID
	u := hex.EncodeToString(b[:])
	u = u[:8] + "-" + u[8:12] + "-" + u[12:16] + "-" + u[16:20] + "-" + u[20:]
	// Two instances starting together on a new database: one row wins, both read it. A
	// read-only server (a replica before anyone wrote it) keeps none.
	_, ierr := db.ExecContext(ctx, "INSERT IGNORE INTO leafd_identity (id, uuid) VALUES (1, ?)", u)
	id, err = read()
	if err == nil && id == "" && ierr != nil && !deniedPrivilege(ierr) {
		var me *mysql.MySQLError
		if !errors.As(ierr, &me) || me.Number != 1290 { // ER_OPTION_PREVENTS_STATEMENT: read-only
			return "", ierr
		}
	}
	return id, err
}
