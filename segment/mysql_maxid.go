package segment

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

var _ maxIDReader = (*MySQLStore)(nil)

// MaxID reads the tag's max_id without changing it: the first ID of the range the next
// Allocate would lease. The generator asks it after a regression instead of allocating, so
// that its retries do not advance max_id. ErrUnknownTag when there is no row.
func (s *MySQLStore) MaxID(ctx context.Context, tag string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var v int64
	err := s.db.QueryRowContext(ctx, "SELECT max_id FROM leaf_alloc WHERE biz_tag = ?", tag).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, fmt.Errorf("%w %q", ErrUnknownTag, tag)
	case err != nil:
		return 0, fmt.Errorf("segment: mysql max_id %q: %w", tag, err)
	}
	return v, nil
}
