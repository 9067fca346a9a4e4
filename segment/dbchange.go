package segment

import "go.uber.org/zap"

// DatabaseNotifier is a Store whose database can become another one while the process runs
// and no call fails: a Galera cluster restarted from a member that lacked commits, whose new
// generation every later transaction takes as another database (internal/mysqlcluster). New
// registers a function the store calls once each time the process learns of such a change,
// before the call that learned it returns. The function must not call into the store.
type DatabaseNotifier interface {
	OnDatabaseChange(f func())
}

// databaseChanged drops every held buffer: their ranges were leased from the database that
// was lost, whose commits another instance may have leased too. Nothing leased before the
// change is issued after this returns (a dropped buffer publishes no load, its segment is
// exhausted, and requests look their tag up again); the next request of each tag loads a range of the new database, above
// the store's fence. A rare event: the hot path is not involved.
func (g *Generator) databaseChanged() {
	var held []*buffer
	g.tags.each(func(b *buffer) bool {
		held = append(held, b)
		return true
	})
	for _, b := range held {
		g.drop(b)
		// A request that looked b up before the drop takes nothing from it afterwards: every
		// later take of the segment is past its end (one that took a value before this line
		// issued it before the change was known), and the request looks the tag up again.
		if s := b.cur.Load(); s != nil {
			s.cursor.Store(s.end)
		}
	}
	g.log.Warn("segment: the store's database changed (a Galera cluster restarted from a member that lacked commits); every held segment is dropped, each tag loads from the new database",
		zap.Int("tags", len(held)))
}
