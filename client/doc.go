// Package client is leafd's Go client: it serves segment IDs and snowflake IDs from memory,
// the way Leaf serves them inside its own server, and refills from leafd in the background.
//
// For each tag it holds a current range and a next one, each a contiguous block of IDs the
// server leased to this client with INCRBY (the caller of INCRBY owns [r-n+1, r]). Next takes
// from the current range with one atomic add and one compare with the range's end; once the
// range's first tenth is taken, the next range is fetched in the background, so that in
// steady state no Next waits on the network. The
// size of a range follows the rate, as Leaf's dynamic step does on the server: it doubles
// while a range lasts less than Options.BatchTarget and halves while it lasts more than
// twice that, within [Options.MinBatch, Options.MaxBatch] and what the server accepts.
//
// Uniqueness rests on the server: every range comes from one INCRBY reply, which leafd never
// gives twice (across instances sharing a store, restarts and crashes), and within the client
// each value of a range is handed out by exactly one atomic add. A range fetched and not
// handed out when the process ends (Close, a crash) is a gap, never a duplicate. A request
// whose reply is lost (a connection cut) is not retried on the same range: the next request
// leases a new one, so the lost one is a gap too.
//
// Order: IDs of one tag increase within one client while one leafd instance serves it; after
// a failover to another address they are trend-increasing (ranges of different instances
// interleave, as leafd's own segment IDs do across instances). NextN sorts what it returns.
//
// ORDERED tags are not buffered: every Next is a request, so the tag's order across
// instances holds for this client's IDs too. Shaped tags (FORMAT, RESET, OPAQUE) are refused
// with ErrShaped: their IDs are strings from IDS.NEXT.
//
// Snowflake IDs come from a local batch of IDS.SNOWFLAKE. A buffered snowflake ID was made
// before it is handed out, so its timestamp is older than the moment the caller gets it, by
// at most Options.SnowflakeMaxAge: a batch is handed out only until that long after its
// request was sent, then dropped. Time order across processes is therefore within that age.
//
// Client.Tag returns a tag's buffer as a *Tag, whose Next and NextN are those of the Client
// without the lookup of the tag by name (for callers that alternate between tags).
//
// A Client is safe for concurrent use. Errors are *Error values with the server's code
// (UNAVAILABLE, NOTAG, ...); an error never comes with an ID.
package client
