package mysqlstore

// The failover fence for shaped tags' counter rows (docs/SHAPES.md, "Failovers").
//
// A counter row tag@period has a fixed width: the fence's usual sizes, FailoverAllocs ×
// MaxStep for a takeover and one database-wide gap per epoch for every tag created after a
// failover, would push it past its width for good after one failover. So a shaped tag's row
// is sized by what that row can have lost:
//
//   - it is leased at its stored step only (the generator never grows it; an allocation that
//     asks more is refused), so a failover that loses at most FailoverAllocs allocations of
//     it loses at most rowGap = FailoverAllocs × step IDs, and a takeover moves it by rowGap;
//   - a row created after a takeover of the database row starts one rowGap above START for
//     each takeover that may have lost an earlier creation of it — a takeover recorded at or
//     after its period's start less rowTakeoverMargin — and not for older ones: a row of a
//     period that began after a takeover cannot have been created before it (clocks within
//     the margin of each other).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafd/leafd/segment"
)

// rowTakeoverMargin: a period's row may be created this long before the period starts (the
// handlers' PeriodLead, 30 s) by an instance whose clock is ahead of the one that recorded a
// takeover by up to the rest.
const rowTakeoverMargin = 10 * time.Minute

// takeoverKeyPrefix names the leafd_fence rows that record the database row's takeovers, one
// per epoch (max_end: the instant, Unix ms). Its first byte is one no tag name has.
const takeoverKeyPrefix = "\x01takeover "

func takeoverKey(epoch int64) string { return fmt.Sprintf("%s%020d", takeoverKeyPrefix, epoch) }

// recordTakeover writes the instant of the database row's takeover to epoch, in its
// transaction.
func (s *MySQLStore) recordTakeover(ctx context.Context, tx *sql.Tx, self serverIdent, epoch int64) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO leafd_fence (biz_tag, server_id, server_uuid, epoch, token, gap, max_end) VALUES (?, ?, ?, ?, ?, 0, ?)"+
		" ON DUPLICATE KEY UPDATE server_id = VALUES(server_id), server_uuid = VALUES(server_uuid), token = VALUES(token), max_end = VALUES(max_end)",
		takeoverKey(epoch), self.id, self.uuid, epoch, randToken(), s.now().UnixMilli())
	return err
}

// takeoversBefore returns how many takeovers of epochs 2..epoch were recorded before t.
func takeoversBefore(ctx context.Context, tx *sql.Tx, epoch int64, t time.Time) (int64, error) {
	var n int64
	err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM leafd_fence WHERE biz_tag >= ? AND biz_tag <= ? AND max_end < ?",
		takeoverKey(2), takeoverKey(epoch), t.UnixMilli()).Scan(&n)
	return n, err
}

// rowOffset is how far above its START a shaped tag's row t created in database epoch
// starts: rowGap for each takeover not known to be older than its period (a takeover without
// a record counts).
func (s *MySQLStore) rowOffset(ctx context.Context, tx *sql.Tx, epoch int64, t segment.Tag) (int64, error) {
	if epoch <= 1 {
		return 0, nil
	}
	n := epoch - 1
	if !t.Row.PeriodStart.IsZero() {
		old, err := takeoversBefore(ctx, tx, epoch, t.Row.PeriodStart.Add(-rowTakeoverMargin))
		if err != nil {
			return 0, fmt.Errorf("takeovers: %w", err)
		}
		n = max(n-old, 0)
	}
	g := s.failoverAllocs * t.Step
	if n > 0 && g > segment.MaxRangeEnd/n {
		return segment.MaxRangeEnd, nil // refused by the caller (ErrLimit)
	}
	return g * n, nil
}

// RowGap is how far a failover moves a shaped tag's row of step step (0: no fence).
func (s *MySQLStore) RowGap(step int64) int64 { return s.failoverAllocs * step }

// shapedRowStep reports, inside an allocation's transaction, whether tag is a shaped tag's
// counter row, and refuses an allocation of one that asks more than its stored step (what
// the row's failover gap is sized by). A consistent read: shapes never change.
func (s *MySQLStore) shapedRowStep(ctx context.Context, tx *sql.Tx, tag string, stored, step int64) (bool, error) {
	i := strings.IndexByte(tag, '@')
	if i <= 0 {
		return false, nil
	}
	var one int
	err := tx.QueryRowContext(ctx, "SELECT 1 FROM leafd_tag_shape WHERE biz_tag = ?", tag[:i]).Scan(&one)
	var me *mysql.MySQLError
	switch {
	case errors.Is(err, sql.ErrNoRows), errors.As(err, &me) && me.Number == mysqlErrNoSuchTable:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("check shape: %w", err)
	}
	if step > stored {
		return true, &segment.TagError{Tag: tag, Err: segment.ErrLimit, Detail: fmt.Sprintf(
			"a shaped tag's row is leased at its step %d only (its failover gap is sized by it), not %d", stored, step)}
	}
	return true, nil
}
