// Package zk is the ZooKeeper worker-id source of the snowflake generator, compatible with
// Meituan Leaf's tree: persistent sequential nodes /snowflake/<name>/forever/<ip>:<port>-<seq>
// whose sequence number is the worker id, with Leaf's {"ip","port","timestamp"} JSON.
//
// leafd's own state lives beside Leaf's nodes: an ephemeral live node per worker id (the
// exclusive claim), a persistent state node holding reserved_until, written with a version
// check (the fence), and the layout node. See Source for the argument; claim.go holds the claim
// and the fence, layout.go the layout node, connect.go the connect string.
//
// The snowflake core does not import this package (nor go-zookeeper): cmd/leafd builds a
// Source and hands it to snowflake.New as a snowflake.WorkerSource.
package zk
