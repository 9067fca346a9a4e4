// Package limits holds the one default that several packages share: the largest count of one
// batch command. Every other default lives in its package's DefaultConfig.
package limits

// MaxBatch is the default largest count of IDs one call hands out (IDS.SEGMENT n,
// IDS.SNOWFLAKE n, AppendIDs of either generator): the documented default of --max-batch
// (README). cmd/leafd passes the one --max-batch value to the handlers and both generators.
const MaxBatch = 1000
