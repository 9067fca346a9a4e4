package ordered

// AssumeTable records that leafd_leader exists (created by an administrator from
// docs/schema.sql): EnsureTable's CREATE is never run, so a user without CREATE can serve
// ordered tags (leafd's --mysql-create-table=false).
func (m *MySQLLeases) AssumeTable() { m.ensured.Store(true) }
