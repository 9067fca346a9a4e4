package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leafd/leafd/admin"
	"github.com/leafd/leafd/handlers"
	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/mysqlstore"
	"github.com/leafd/leafd/snowflake"
	"github.com/leafd/leafd/snowflake/mysqlworker"
	"github.com/leafd/leafd/snowflake/zk"
)

// Config is everything leafd can be told, from flags, LEAFD_* environment variables and a
// config file, in that order of precedence.
type Config struct {
	Addr     string
	HTTPAddr string // "" disables the admin side
	DataDir  string
	// AcceptMissingMarks starts the embedded store although marks.db is missing or not paired
	// with leafd.db (boltstore.PairMarks), pairing them anew.
	AcceptMissingMarks bool
	// SwitchStore starts the data dir on a store other than the one its store record names
	// (storeid.go), recording the new one.
	SwitchStore   bool
	MySQLDSN      string
	ZKAddrs       string
	Name          string
	WorkerID      int64 // -1: unset
	AdvertiseAddr string
	WorkerReuse   bool
	ZKSession     time.Duration
	// ZKOutageTolerance: how long past the bound ZooKeeper confirmed an instance keeps issuing
	// without ZooKeeper.
	ZKOutageTolerance time.Duration
	// WorkerSource: auto, mysql, zookeeper, file, static or statefulset (Config.Source resolves
	// auto). WorkerLease: the MySQL lease; WorkerOffset, PodOrdinal (-1: the hostname's suffix):
	// statefulset.
	WorkerSource string
	WorkerLease  time.Duration
	WorkerOffset int64
	PodOrdinal   int64
	// Region is --region k/n (region.go); "" is the single region.
	Region      string
	RequirePass string
	// Secrets by file (secrets.go); the file's content replaces the value.
	RequirePassFile string
	MySQLDSNFile    string
	HTTPAuth        string
	HTTPAuthFile    string
	HTTPOpenProbes  bool
	HTTPTLS         bool
	HTTPMaxClients  int
	// secretsOnCmdline names the secrets given as flags (visible in ps): warned at start.
	secretsOnCmdline []string
	// boundAddr is the RESP address bound at start when --addr names port 0 (run).
	boundAddr   string
	Modes       string // --modes: "segment", "snowflake" or both, comma-separated
	AutoCreate  string // "auto", "on", "off"
	AllowCreate bool
	LogLevel    string
	LogFormat   string

	MaxClients     int
	IdleTimeout    time.Duration
	MaxBulk        int
	MaxQueryBuffer int
	MaxOutput      int
	MaxArgs        int
	MaxBatch       int
	TLSCert        string
	TLSKey         string
	ServerModel    string
	LoopSpin       time.Duration

	WaitTimeout     time.Duration
	MaxLoaders      int
	PreloadRatio    float64
	DefaultStep     int64
	MaxStep         int64
	TagRefresh      time.Duration
	LoadTimeout     time.Duration
	MaxTags         int
	MetricsMaxTags  int // per-tag series in /metrics at most (admin.Config.MetricsMaxTags; 0: none)
	WarmTags        int
	MySQLMaxConns   int
	MySQLLifetime   time.Duration
	MySQLCreate     bool
	MySQLFailover   int64
	MySQLSemiSync   bool
	SnowflakeEpoch  int64
	SnowflakeBits   string
	SnowflakeSeq0   bool
	ClockBackMax    time.Duration
	LeaseWindow     time.Duration
	StartWaitMax    time.Duration
	ShutdownTimeout time.Duration
	// OrderedLease is the leader lease of ORDERED tags (package ordered).
	OrderedLease time.Duration

	// IDKeyFile holds the AES key of opaque tags as hex ; never logged or shown.
	IDKeyFile string
	// PeriodClockOffset shifts the clock that picks shaped tags' periods (drills, tests).
	PeriodClockOffset time.Duration
}

// flagSet declares every option with its default and help. The names are the contract of
// docs/CONTRACT.md (operations); the environment variable of a flag is LEAFD_ + its name upper-cased, '-' as '_'.
func flagSet(c *Config) *flag.FlagSet {
	sf, zc := snowflake.DefaultConfig(), zk.DefaultConfig() // the snowflake and ZooKeeper defaults
	fs := flag.NewFlagSet("leafd", flag.ContinueOnError)
	// The defaults of the packages' options are theirs (DefaultConfig); only the server's own
	// options have their defaults here.
	rc, hc, sc, mc := resp.DefaultConfig(), handlers.DefaultConfig(), segment.DefaultConfig(), mysqlstore.DefaultMySQLConfig()
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:6380", "RESP listen address")
	fs.StringVar(&c.HTTPAddr, "http-addr", "127.0.0.1:8080", "admin/HTTP listen address (metrics, probes, status, Leaf's HTTP API); empty disables")
	fs.StringVar(&c.HTTPAuth, "http-auth", "", "token the admin port requires (Authorization: Bearer <token>, or Basic with it as the password); default: the --requirepass password")
	fs.StringVar(&c.HTTPAuthFile, "http-auth-file", "", "file holding the --http-auth token (preferred over the flag)")
	fs.BoolVar(&c.HTTPOpenProbes, "http-open-probes", false, "with a token set, leave /healthz and a tag-less /readyz ({\"ready\": bool} only) open for probes")
	fs.BoolVar(&c.HTTPTLS, "http-tls", false, "serve the admin port over TLS with --tls-cert/--tls-key")
	fs.IntVar(&c.HTTPMaxClients, "http-maxclients", 64, "admin connections served at once; more wait in the listen backlog")
	fs.StringVar(&c.DataDir, "data-dir", "./leafd-data", "embedded store, regression marks and worker-id caches")
	fs.BoolVar(&c.AcceptMissingMarks, "accept-missing-marks", false, "embedded store: start although marks.db is missing or not paired with leafd.db (raise max_id above every ID issued first; docs/SEGMENT.md)")
	fs.BoolVar(&c.SwitchStore, "switch-store", false, "start although the data dir served another store (the embedded one, or another MySQL database) and record the new one; the data dir's marks stay (docs/OPERATIONS.md)")
	fs.StringVar(&c.MySQLDSN, "mysql-dsn", "", "go-sql-driver DSN; when set, segments come from MySQL/MariaDB (table leaf_alloc); prefer LEAFD_MYSQL_DSN or --mysql-dsn-file")
	fs.StringVar(&c.MySQLDSNFile, "mysql-dsn-file", "", "file holding the --mysql-dsn (preferred over the flag)")
	fs.StringVar(&c.ZKAddrs, "zk-addrs", "", "ZooKeeper connection string host:port[,host:port...][/chroot]; when set, worker ids come from ZooKeeper")
	fs.StringVar(&c.Name, "name", zc.Name, "cluster name (Leaf's leaf.name; ZooKeeper path /snowflake/<name>)")
	fs.Int64Var(&c.WorkerID, "worker-id", -1, "static snowflake worker id (instead of ZooKeeper or the local default); -1: unset")
	fs.StringVar(&c.AdvertiseAddr, "advertise-addr", "", "identity in ZooKeeper (ip:port; default: first non-loopback IPv4 + listen port) and the RESP address other instances forward ORDERED tags' commands to (default: the listen address)")
	fs.DurationVar(&c.OrderedLease, "ordered-lease", 3*time.Second, "leader lease of ORDERED tags: a dead leader's tag answers TRYAGAIN for up to this long")
	fs.BoolVar(&c.WorkerReuse, "worker-reuse", false, "let a new instance take over the worker id of a dead one (ZooKeeper)")
	fs.DurationVar(&c.ZKSession, "zk-session-timeout", zc.SessionTimeout, "ZooKeeper session timeout: how long a dead instance's worker id stays live (worker reuse)")
	fs.DurationVar(&c.ZKOutageTolerance, "zk-outage-tolerance", zc.OutageTolerance, "how long past the time bound ZooKeeper last confirmed an instance keeps issuing snowflake IDs without ZooKeeper (another instance taking the id waits as long); 0: not beyond the lease")
	fs.StringVar(&c.WorkerSource, "worker-source", "auto", "where snowflake worker ids come from: auto (--worker-id: static; --zk-addrs: zookeeper; --mysql-dsn: mysql; else file), mysql, zookeeper, file, static or statefulset")
	fs.DurationVar(&c.WorkerLease, "worker-lease", mysqlworker.DefaultConfig().Lease, "MySQL worker ids: the lease of a row in leafd_worker (a taker issues only after lease + 1s; must exceed --lease-window)")
	fs.Int64Var(&c.WorkerOffset, "worker-offset", 0, "statefulset worker ids: worker id = offset + pod ordinal (several StatefulSets in one domain)")
	fs.StringVar(&c.Region, "region", "", regionUsage)
	fs.Int64Var(&c.PodOrdinal, "pod-ordinal", -1, "statefulset worker ids: this pod's ordinal; -1: the number after the last '-' of the hostname")
	fs.StringVar(&c.RequirePass, "requirepass", "", "password for AUTH / HELLO ... AUTH; prefer --requirepass-file or LEAFD_REQUIREPASS")
	fs.DurationVar(&c.PeriodClockOffset, "period-clock-offset", 0, "shift the clock that picks a periodic tag's period by this much (drills across a simulated midnight; IDs stay unique whatever the clocks)")
	fs.StringVar(&c.IDKeyFile, "id-key-file", "", "file holding the AES key of OPAQUE tags as 32 or 64 hex digits (AES-128/256); surrounding whitespace ignored; never logged or shown by CONFIG GET")
	fs.StringVar(&c.RequirePassFile, "requirepass-file", "", "file holding the --requirepass password (preferred over the flag)")
	fs.StringVar(&c.Modes, "modes", "segment,snowflake", "ID modes served: segment, snowflake, or segment,snowflake; a mode left out answers DISABLED, is left out of /readyz, and (snowflake) its worker-id source is not contacted")
	fs.StringVar(&c.AutoCreate, "auto-create", "auto", "create unknown tags on first use: on, off, or auto (on with the embedded store, off with MySQL)")
	fs.BoolVar(&c.AllowCreate, "allow-create", true, "let clients create tags (IDS.CREATE and auto-create); false locks tag creation to the operator")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "console", "console or json")

	fs.IntVar(&c.MaxClients, "maxclients", rc.MaxClients, "connections served at once")
	fs.DurationVar(&c.IdleTimeout, "timeout", rc.IdleTimeout, "close a client idle this long (0 disables)")
	fs.IntVar(&c.MaxBulk, "max-bulk", rc.Limits.MaxBulk, "largest RESP argument in bytes")
	fs.IntVar(&c.MaxQueryBuffer, "max-query-buffer", rc.MaxQueryBuffer, "largest unparsed input held per connection, bytes")
	fs.IntVar(&c.MaxOutput, "max-output-buffer", rc.MaxOutputBuffer, "close a client whose pending replies exceed this many bytes (0 disables)")
	fs.IntVar(&c.MaxArgs, "max-args", rc.Limits.MaxMultibulk, "most arguments of one command, its name included")
	fs.IntVar(&c.MaxBatch, "max-batch", hc.MaxBatch, "largest count of IDS.SEGMENT and IDS.SNOWFLAKE")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "TLS certificate file (with --tls-key: serve RESP over TLS)")
	fs.StringVar(&c.TLSKey, "tls-key", "", "TLS key file")
	fs.StringVar(&c.ServerModel, "server-model", resp.DefaultConfig().Model, "how RESP connections are served: eventloop (epoll loops, one per GOMAXPROCS, Linux; TLS connections still get a goroutine each) or goroutine (a goroutine per connection)")
	fs.DurationVar(&c.LoopSpin, "loop-spin", resp.DefaultLoopSpin, "an event loop polls on this long after a round with work before it parks, so that the next request finds it awake (0 disables: park at once)")

	fs.DurationVar(&c.WaitTimeout, "wait-timeout", sc.WaitTimeout, "how long a request waits for a segment before UNAVAILABLE")
	fs.IntVar(&c.MaxLoaders, "max-loaders", sc.MaxLoaders, "segment loads running at once, across all tags")
	fs.Float64Var(&c.PreloadRatio, "preload-ratio", sc.PreloadRatio, "preload the next segment once this fraction of the current one is used")
	fs.Int64Var(&c.DefaultStep, "default-step", sc.DefaultStep, "step of tags created by auto-create or IDS.CREATE without STEP")
	fs.Int64Var(&c.MaxStep, "max-step", sc.MaxStep, "upper bound of the dynamic step")
	fs.DurationVar(&c.TagRefresh, "tag-refresh", sc.RefreshInterval, "period of the tag list refresh from the store")
	fs.DurationVar(&c.LoadTimeout, "load-timeout", sc.LoadTimeout, "timeout of one segment allocation in the store")
	fs.IntVar(&c.MaxTags, "max-tags", sc.MaxTags, "segment tags held by this instance at most (LIMIT beyond)")
	fs.IntVar(&c.MetricsMaxTags, "metrics-max-tags", admin.DefaultMetricsMaxTags, "tags with per-tag series in /metrics at most (those that cannot serve, failing, running out, then the busiest; totals cover every tag); 0 for none")
	fs.IntVar(&c.WarmTags, "warm-tags", sc.WarmTags, "at start, load the first segment of at most this many tags served before (0 disables)")
	fs.IntVar(&c.MySQLMaxConns, "mysql-max-conns", mc.MaxOpenConns, "MySQL connection pool size")
	fs.DurationVar(&c.MySQLLifetime, "mysql-conn-max-lifetime", mc.ConnMaxLifetime, "recycle MySQL connections older than this (keep it below proxy and server idle limits)")
	fs.BoolVar(&c.MySQLCreate, "mysql-create-table", mc.CreateTable, "create leaf_alloc (and leafd_fence) when missing")
	fs.Int64Var(&c.MySQLFailover, "mysql-failover-allocs", mc.FailoverAllocs, "most allocations per tag a database failover may lose: after a failover max_id first moves by this many × max(--max-step, stored step); 0 turns the fence off")
	fs.BoolVar(&c.MySQLSemiSync, "mysql-require-semisync", false, "refuse to lease (UNAVAILABLE) unless the primary replicates semi-synchronously")
	fs.Int64Var(&c.SnowflakeEpoch, "snowflake-epoch", sf.Layout.EpochMs(), "snowflake epoch, Unix ms (Leaf's default)")
	fs.StringVar(&c.SnowflakeBits, "snowflake-bits", fmt.Sprintf("%d/%d/%d", sf.Layout.TimeBits, sf.Layout.WorkerBits, sf.Layout.SeqBits), "snowflake layout: time/worker/sequence bits, summing to 63, or to at most 53 for IDs JavaScript reads exactly; \"js\" is 41/3/9 (8 workers, 512 IDs/ms each)")
	fs.BoolVar(&c.SnowflakeSeq0, "snowflake-seq-zero", sf.SequenceStartZero, "start each millisecond's sequence at 0 instead of a random value in [0,100)")
	fs.DurationVar(&c.ClockBackMax, "clock-back-max", sf.MaxBackward, "largest clock step back that is waited out; more is CLOCKBACK")
	fs.DurationVar(&c.LeaseWindow, "lease-window", sf.LeaseWindow, "how far ahead the snowflake time bound is persisted")
	fs.DurationVar(&c.StartWaitMax, "start-wait-max", sf.MaxStartWait, "longest wait at start for the clock to pass the persisted time bound")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "how long shutdown waits for in-flight replies")
	return fs
}

// envName is the environment variable of a flag.
func envName(flagName string) string {
	return "LEAFD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// errShowVersion is loadConfig's answer to --version: print the version and exit 0.
var errShowVersion = errors.New("show the version")

// usageHeader opens --help: the subcommands, then the server's flags.
const usageHeader = `usage: leafd [flags]                  serve (RESP on --addr, admin HTTP on --http-addr)
       leafd health [--ready] [--addr host:port]
                                      probe a running leafd's /healthz (/readyz); exit 0 when 200
       leafd raise-max-id --mysql-dsn DSN --instances host:port[,...]
                                      after a database failover: raise max_id above every mark
       leafd adopt --mysql-dsn DSN [--dry-run]
                                      take over an existing Leaf leaf_alloc table (docs/MYSQL.md)
       leafd version                  print the version (also --version)
Each subcommand has its own --help. Every flag below can also be set as LEAFD_<NAME> (upper
case, '-' as '_') or in the --config file.

flags:
`

// loadConfig fills a Config from args, the environment (getenv) and the --config file.
func loadConfig(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var c Config
	fs := flagSet(&c)
	configPath := fs.String("config", "", "config file: lines of 'name value' or 'name = value' with the flag names; # comments")
	showVersion := fs.Bool("version", false, "print the version and exit (also: leafd version)")
	if err := parseArgs(fs, args, stderr, func() { fmt.Fprint(stderr, usageHeader); fs.PrintDefaults() }); err != nil {
		return c, err
	}
	if *showVersion {
		return c, errShowVersion
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	onCmdline := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCmdline[f.Name] = true })
	for _, name := range []string{"requirepass", "mysql-dsn", "http-auth"} {
		if onCmdline[name] {
			c.secretsOnCmdline = append(c.secretsOnCmdline, name)
		}
	}
	if err := applyLayers(fs, onCmdline, func(string) bool { return true }, getenv, *configPath); err != nil {
		return c, err
	}
	if err := c.readSecrets(); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// expected says what a flag's value must look like, for the error of a value from the
// environment or the config file (the flag package says only "parse error").
func expected(f *flag.Flag) string {
	want := "not a valid value"
	switch f.Value.(flag.Getter).Get().(type) {
	case bool:
		want = "want true or false"
	case int, int64, uint, uint64:
		want = "want a whole number"
	case float64:
		want = "want a decimal number such as 0.5"
	case time.Duration:
		want = "want a duration such as 500ms, 10s or 1m"
	}
	return fmt.Sprintf("%s (default %s)", want, f.DefValue)
}

// readConfigFile reads 'name value' / 'name = value' lines; every name must be a flag.
func readConfigFile(path string, fs *flag.FlagSet) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	defer f.Close()
	vals := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		// The name ends at the first blank or '='; the value may contain '=' (DSNs do).
		name, val := line, ""
		if i := strings.IndexAny(line, " \t="); i >= 0 {
			name, val = line[:i], strings.TrimSpace(line[i:])
			val = strings.TrimSpace(strings.TrimPrefix(val, "="))
		}
		if uq, err := strconv.Unquote(val); err == nil {
			val = uq
		}
		if fs.Lookup(name) == nil || name == "config" || name == "version" {
			var names []string
			fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
			return nil, fmt.Errorf("%s:%d: unknown option %q (did you mean %s?)", path, n, name, nearest(name, names))
		}
		vals[name] = val
	}
	return vals, sc.Err()
}

// Validate checks values the flag package cannot.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if _, _, err := parseModes(c.Modes); err != nil {
		bad("--modes %q: %v", c.Modes, err)
	}
	switch c.AutoCreate {
	case "auto", "on", "off", "true", "false":
	default:
		bad("--auto-create %q: want on, off or auto", c.AutoCreate)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "console", "json":
	default:
		bad("--log-format %q: want console or json", c.LogFormat)
	}
	if c.WorkerID < -1 {
		bad("--worker-id %d: must be >= 0", c.WorkerID)
	}
	if c.WorkerID >= 0 && c.ZKAddrs != "" {
		bad("--worker-id and --zk-addrs exclude each other: choose one worker-id source")
	}
	c.validateWorkerSource(bad)
	c.validateRegion(bad)
	if c.WorkerReuse && c.ZKAddrs == "" {
		bad("--worker-reuse needs --zk-addrs")
	}
	if c.ZKSession < time.Second {
		bad("--zk-session-timeout %v: must be at least 1s", c.ZKSession)
	}
	if c.ZKOutageTolerance < 0 {
		bad("--zk-outage-tolerance %v: must not be negative (0: no tolerance)", c.ZKOutageTolerance)
	}
	if c.ZKAddrs != "" {
		if _, _, err := zk.ParseConnect(c.ZKAddrs); err != nil {
			bad("--zk-addrs: %v", err)
		}
	}
	// Snowflake durations: zero never silently means a default.
	if c.ClockBackMax <= 0 {
		bad("--clock-back-max %v: must be positive (1ms waits out the least)", c.ClockBackMax)
	}
	if c.OrderedLease < 100*time.Millisecond {
		bad("--ordered-lease %v: must be at least 100ms", c.OrderedLease)
	}
	if c.LeaseWindow < 10*time.Millisecond {
		bad("--lease-window %v: must be at least 10ms", c.LeaseWindow)
	}
	if c.StartWaitMax <= 0 {
		bad("--start-wait-max %v: must be positive (the longest wait for the clock to pass the persisted bound)", c.StartWaitMax)
	}
	// A restart after kill -9 waits out the last lease (and, with ZooKeeper, the outage
	// tolerance the crashed run announced); refused at every start past --start-wait-max, it
	// would crash-loop the server.
	if c.StartWaitMax > 0 && c.LeaseWindow >= 10*time.Millisecond {
		wait, what := c.LeaseWindow, "--lease-window "+c.LeaseWindow.String()
		if c.ZKAddrs != "" && c.ZKOutageTolerance > 0 {
			wait += c.ZKOutageTolerance
			what += " plus --zk-outage-tolerance " + c.ZKOutageTolerance.String()
		}
		if wait > c.StartWaitMax {
			bad("%s is longer than --start-wait-max %v: a restart after a crash must wait that long and would be refused; "+
				"raise --start-wait-max or lower the others", what, c.StartWaitMax)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("--tls-cert and --tls-key go together")
	}
	if c.MaxClients < 1 || c.MaxBatch < 1 || c.MaxLoaders < 1 || c.MaxBulk < 1 || c.MaxQueryBuffer < 1 || c.HTTPMaxClients < 1 {
		bad("--maxclients, --http-maxclients, --max-batch, --max-loaders, --max-bulk and --max-query-buffer must be positive")
	}
	if c.ServerModel != resp.ModelEventLoop && c.ServerModel != resp.ModelGoroutine {
		bad("--server-model %q: must be %s or %s", c.ServerModel, resp.ModelEventLoop, resp.ModelGoroutine)
	}
	if c.LoopSpin < 0 || c.LoopSpin > time.Millisecond {
		bad("--loop-spin %s: must be between 0 and 1ms", c.LoopSpin)
	}
	if c.MaxArgs < 3 {
		bad("--max-args %d: must be at least 3 (AUTH user pass)", c.MaxArgs)
	}
	if c.MaxOutput < 0 {
		bad("--max-output-buffer %d: must not be negative (0 disables)", c.MaxOutput)
	}
	if c.HTTPTLS && c.TLSCert == "" {
		bad("--http-tls needs --tls-cert and --tls-key")
	}
	if c.MaxBulk >= 1 && c.MaxQueryBuffer >= 1 {
		rc := resp.Config{MaxQueryBuffer: c.MaxQueryBuffer, Limits: resp.Limits{MaxBulk: c.MaxBulk}}
		if rc.Validate() != nil {
			bad("--max-query-buffer %d: must hold --max-bulk (%d) and its header; raise it or lower --max-bulk", c.MaxQueryBuffer, c.MaxBulk)
		}
	}
	if c.IdleTimeout < 0 {
		bad("--timeout %v: must not be negative (0 disables)", c.IdleTimeout)
	}
	if c.PreloadRatio <= 0 || c.PreloadRatio >= 1 {
		bad("--preload-ratio %v: must be in (0, 1)", c.PreloadRatio)
	}
	if c.MySQLFailover < 0 || c.MySQLFailover > 1_000_000 {
		bad("--mysql-failover-allocs %d: must be in [0, 1000000]", c.MySQLFailover)
	}
	if c.MySQLMaxConns < 1 || c.MySQLLifetime <= 0 {
		bad("--mysql-max-conns and --mysql-conn-max-lifetime must be positive")
	}
	if c.MetricsMaxTags < 0 {
		bad("--metrics-max-tags must not be negative (0 exports totals only)")
	}
	if c.MaxTags < 1 || c.WarmTags < 0 {
		bad("--max-tags must be positive and --warm-tags not negative")
	}
	if !c.AllowCreate && (c.AutoCreate == "on" || c.AutoCreate == "true") {
		bad("--auto-create on contradicts --allow-create=false (which locks tag creation to the operator)")
	}
	if c.WaitTimeout <= 0 || c.LoadTimeout <= 0 || c.TagRefresh <= 0 {
		bad("--wait-timeout, --load-timeout and --tag-refresh must be positive")
	}
	if _, err := parseBits(c.SnowflakeBits); err != nil {
		bad("--snowflake-bits %q: %v", c.SnowflakeBits, err)
	}
	if c.HTTPAddr != "" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			bad("--http-addr %q: %v", c.HTTPAddr, err)
		}
	}
	if c.DataDir == "" {
		bad("--data-dir must not be empty")
	}
	return errors.Join(errs...)
}

// parseModes parses --modes: a comma-separated, non-empty set of segment and snowflake.
func parseModes(s string) (seg, snow bool, err error) {
	for _, m := range strings.Split(s, ",") {
		switch strings.TrimSpace(m) {
		case "segment":
			seg = true
		case "snowflake":
			snow = true
		default:
			return false, false, fmt.Errorf("unknown mode %q: want segment, snowflake or segment,snowflake", strings.TrimSpace(m))
		}
	}
	return seg, snow, nil
}

// segmentOn and snowflakeOn are the modes --modes enables (validated).
func (c Config) segmentOn() bool   { seg, _, _ := parseModes(c.Modes); return seg }
func (c Config) snowflakeOn() bool { _, snow, _ := parseModes(c.Modes); return snow }

// parseBits parses "41/10/12".
func parseBits(s string) ([3]int, error) {
	var out [3]int
	if strings.EqualFold(s, "js") { // the JavaScript-safe layout: IDs below 2^53
		l := snowflake.JSLayout()
		return [3]int{l.TimeBits, l.WorkerBits, l.SeqBits}, nil
	}
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return out, errors.New("want time/worker/sequence, e.g. 41/10/12")
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return out, fmt.Errorf("%q is not a positive number", p)
		}
		out[i] = n
	}
	if sum := out[0] + out[1] + out[2]; sum != 63 && sum > snowflake.JSBits {
		return out, fmt.Errorf("the three widths must sum to 63, or to at most %d for JavaScript-safe IDs (\"js\": 41/3/9)", snowflake.JSBits)
	}
	return out, nil
}

// autoCreate resolves --auto-create against the store in use; --allow-create=false turns it
// off (one switch locks every way a client could create a tag).
func (c Config) autoCreate() bool {
	if !c.AllowCreate {
		return false
	}
	switch c.AutoCreate {
	case "on", "true":
		return true
	case "off", "false":
		return false
	}
	return c.MySQLDSN == ""
}

// configValues are the values CONFIG GET reports; redis-benchmark asks for save and
// appendonly.
func (c Config) configValues() map[string]string {
	return map[string]string{
		"save":                      "",
		"appendonly":                "no",
		"databases":                 "1",
		"maxclients":                strconv.Itoa(c.MaxClients),
		"timeout":                   strconv.Itoa(int(c.IdleTimeout / time.Second)),
		"proto-max-bulk-len":        strconv.Itoa(c.MaxBulk),
		"client-query-buffer-limit": strconv.Itoa(c.MaxQueryBuffer),
		"bind":                      c.Addr,
	}
}
