package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/leafd/leafd/snowflake"
	"github.com/leafd/leafd/snowflake/mysqlworker"
)

// The worker-id sources of --worker-source.
const (
	srcAuto        = "auto"
	srcMySQL       = "mysql"
	srcZooKeeper   = "zookeeper"
	srcFile        = "file"
	srcStatic      = "static"
	srcStatefulSet = "statefulset"
)

// Source resolves --worker-source: auto follows the deployment. --worker-id: static;
// --zk-addrs: zookeeper; --mysql-dsn (instances sharing a database): mysql; else (a lone
// instance on the embedded store) the local file.
func (c Config) Source() string {
	if c.WorkerSource != srcAuto && c.WorkerSource != "" {
		return c.WorkerSource
	}
	switch {
	case c.WorkerID >= 0:
		return srcStatic
	case c.ZKAddrs != "":
		return srcZooKeeper
	case c.MySQLDSN != "" || c.MySQLDSNFile != "":
		return srcMySQL
	}
	return srcFile
}

// validateWorkerSource checks --worker-source against the flags it needs and excludes.
func (c Config) validateWorkerSource(bad func(string, ...any)) {
	switch c.WorkerSource {
	case srcAuto, srcMySQL, srcZooKeeper, srcFile, srcStatic, srcStatefulSet:
	default:
		bad("--worker-source %q: want auto, mysql, zookeeper, file, static or statefulset", c.WorkerSource)
		return
	}
	src := c.Source()
	if c.ZKAddrs != "" && src != srcZooKeeper {
		bad("--zk-addrs is set but --worker-source is %s: drop one", src)
	}
	if c.WorkerID >= 0 && src != srcStatic {
		bad("--worker-id is set but --worker-source is %s: drop one", src)
	}
	switch src {
	case srcMySQL:
		if c.MySQLDSN == "" && c.MySQLDSNFile == "" {
			bad("--worker-source mysql needs --mysql-dsn (worker ids live in its table %s)", mysqlworker.Table)
		}
		if c.WorkerLease < 300*time.Millisecond {
			bad("--worker-lease %v: must be at least 300ms", c.WorkerLease)
		} else if c.WorkerLease <= c.LeaseWindow {
			bad("--worker-lease %v must be longer than --lease-window %v: the time bound is persisted only within the lease", c.WorkerLease, c.LeaseWindow)
		}
		if wait := (mysqlworker.Config{Lease: c.WorkerLease}).TakerWait(); c.StartWaitMax > 0 && wait >= c.StartWaitMax {
			bad("--worker-lease %v plus the 1s margin is not below --start-wait-max %v: every acquisition waits that long and would be refused; "+
				"raise --start-wait-max or lower --worker-lease", c.WorkerLease, c.StartWaitMax)
		}
	case srcZooKeeper:
		if c.ZKAddrs == "" {
			bad("--worker-source zookeeper needs --zk-addrs")
		}
	case srcStatic:
		if c.WorkerID < 0 {
			bad("--worker-source static needs --worker-id")
		}
	}
	if src != srcStatefulSet && (c.WorkerOffset != 0 || c.PodOrdinal != -1) {
		bad("--worker-offset and --pod-ordinal are for --worker-source statefulset")
	}
	if c.WorkerOffset < 0 {
		bad("--worker-offset %d: must not be negative", c.WorkerOffset)
	}
	if c.PodOrdinal < -1 {
		bad("--pod-ordinal %d: must be >= 0 (-1: from the hostname)", c.PodOrdinal)
	}
}

// errNoOrdinal: the statefulset source found no pod ordinal.
var errNoOrdinal = errors.New("no pod ordinal")

// podOrdinal is --pod-ordinal (or LEAFD_POD_ORDINAL), else the number after the last '-' of
// the hostname (a StatefulSet pod is <statefulset>-<ordinal>).
func podOrdinal(c Config, hostname func() (string, error)) (int64, string, error) {
	if c.PodOrdinal >= 0 {
		return c.PodOrdinal, "--pod-ordinal", nil
	}
	h, err := hostname()
	if err != nil {
		return 0, "", fmt.Errorf("%w: hostname: %v", errNoOrdinal, err)
	}
	i := strings.LastIndexByte(h, '-')
	n, perr := strconv.ParseInt(h[i+1:], 10, 64)
	if i < 0 || perr != nil || n < 0 || strings.HasPrefix(h[i+1:], "+") {
		return 0, "", fmt.Errorf("%w: the hostname %q does not end in -<ordinal>; set --pod-ordinal or LEAFD_POD_ORDINAL "+
			"(e.g. from the pod label apps.kubernetes.io/pod-index)", errNoOrdinal, h)
	}
	return n, "hostname " + h, nil
}

// statefulSetWorkerID is --worker-offset + the pod ordinal, refused when it does not fit the
// layout's worker bits.
func statefulSetWorkerID(c Config, maxWorkerID int64, hostname func() (string, error)) (int64, error) {
	n, from, err := podOrdinal(c, hostname)
	if err != nil {
		return 0, err
	}
	id := c.WorkerOffset + n
	if n > maxWorkerID || id > maxWorkerID {
		return 0, fmt.Errorf("statefulset worker id %d (--worker-offset %d + ordinal %d from %s) does not fit the layout's worker ids 0-%d: "+
			"fewer replicas, a smaller --worker-offset or more worker bits (--snowflake-bits)", id, c.WorkerOffset, n, from, maxWorkerID)
	}
	return id, nil
}

var osHostname = os.Hostname

// openMySQLWorkerSource builds the MySQL worker-id source on the segment store's database.
func openMySQLWorkerSource(cfg Config, maxWorkerID int64, log *zap.Logger) (snowflake.WorkerSource, error) {
	holder := cfg.AdvertiseAddr
	if holder == "" { // a name for operators (the fences are the token and the epoch)
		h, _ := osHostname()
		addr := cfg.Addr
		if cfg.boundAddr != "" {
			addr = cfg.boundAddr
		}
		holder = h + "/" + addr
	}
	return mysqlworker.NewSource(mysqlworker.Config{
		DSN:           cfg.MySQLDSN,
		DataDir:       cfg.DataDir,
		Holder:        holder,
		Lease:         cfg.WorkerLease,
		MaxWorkerID:   maxWorkerID,
		NoCreateTable: !cfg.MySQLCreate,
		Logger:        log.Named("mysqlworker"),
	})
}

// openStatefulSetSource is the static source on the id of statefulSetWorkerID, with the time
// bound in the data dir (the pod's volume), reported as source "statefulset".
func openStatefulSetSource(cfg Config, maxWorkerID int64, log *zap.Logger) (snowflake.WorkerSource, error) {
	id, err := statefulSetWorkerID(cfg, maxWorkerID, osHostname)
	if err != nil {
		return nil, err
	}
	src, err := snowflake.NewStaticSource(cfg.DataDir, id)
	if err != nil {
		return nil, err
	}
	log.Info("snowflake: worker id from the StatefulSet ordinal", zap.Int64("worker_id", id), zap.Int64("offset", cfg.WorkerOffset))
	return statefulSetSource{src}, nil
}

// statefulSetSource is a StaticSource that names itself "statefulset".
type statefulSetSource struct{ *snowflake.StaticSource }

func (s statefulSetSource) Acquire(ctx context.Context) (snowflake.Worker, error) {
	w, err := s.StaticSource.Acquire(ctx)
	w.Source = srcStatefulSet
	return w, err
}
