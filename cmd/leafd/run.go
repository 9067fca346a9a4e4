package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/leafd/leafd/admin"
	"github.com/leafd/leafd/handlers"
	"github.com/leafd/leafd/resp"
	"github.com/leafd/leafd/segment"
	"github.com/leafd/leafd/segment/boltstore"
	"github.com/leafd/leafd/snowflake"
	"go.uber.org/zap"
)

// run serves until ctx ends, then shuts down in order: stop accepting, finish in-flight
// replies, stop loaders and the snowflake lease, close the stores. ready, when not nil, is
// called with the listen address once the server accepts connections.
func run(ctx context.Context, cfg Config, log *zap.Logger, ready func(net.Addr)) (err error) {
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	for _, name := range cfg.secretsOnCmdline {
		log.Warn("a secret given as a flag is visible to local users (ps); prefer the environment or the -file option",
			zap.String("flag", "--"+name), zap.String("instead", envName(name)+" or --"+name+"-file"))
	}
	// Descriptors for the store, ZooKeeper, the data dir and the admin port come first.
	if err := fitMaxClients(&cfg, log); err != nil {
		return err
	}
	var closers []io.Closer // closed in reverse order on the way out
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			if cerr := closers[i].Close(); cerr != nil {
				log.Warn("close failed", zap.Error(cerr))
			}
		}
	}()

	// --addr with port 0: the kernel picks the port now, before the address other instances
	// forward ORDERED tags to is derived from it (orderedHolder), which then names the port
	// bound. A fixed port is bound once the instance can serve.
	var early net.Listener
	if _, port, perr := net.SplitHostPort(cfg.Addr); perr == nil && port == "0" {
		ln, lerr := net.Listen("tcp", cfg.Addr)
		if lerr != nil {
			return fmt.Errorf("listen: %w", lerr)
		}
		early, cfg.boundAddr = ln, ln.Addr().String()
		defer func() {
			if early != nil { // not handed to the server: the run ended before it served
				_ = early.Close()
			}
		}()
	}

	// Files named by flags are read before anything takes the data dir or a worker id.
	var tlsConfig *tls.Config
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}

	// A relative --data-dir is resolved against the working directory: a start from another
	// directory would silently begin a new store, so the log shows where it is.
	if abs, aerr := filepath.Abs(cfg.DataDir); aerr == nil && abs != cfg.DataDir {
		log.Info("data dir is relative: resolved against the working directory", zap.String("data_dir", cfg.DataDir), zap.String("abs", abs))
		cfg.DataDir = abs
	}
	// --modes: a mode left out is never built (snowflake: its worker-id source is not
	// contacted; segment: no store is opened, the core runs on an empty one).
	var (
		store       segment.Store = modeOffStore{}
		marks       segment.Marks = modeOffStore{}
		storeName                 = "off (--modes)"
		storeCloser []io.Closer
	)
	if cfg.segmentOn() {
		// The data dir serves the store it served before, unless told otherwise (storeid.go).
		rec, err := checkStore(ctx, cfg, log)
		if err != nil {
			return err
		}
		if store, marks, storeName, storeCloser, err = openStore(ctx, cfg, log); err != nil {
			return err
		}
		if err := writeStoreRecord(cfg.DataDir, rec); err != nil {
			for _, c := range storeCloser {
				_ = c.Close()
			}
			return fmt.Errorf("data dir: record the store: %w", err)
		}
	}
	closers = append(closers, storeCloser...)
	if err := checkRegion(ctx, cfg, store, log); err != nil {
		return err
	}

	scfg := segment.DefaultConfig()
	scfg.AutoCreate = cfg.autoCreate()
	scfg.WaitTimeout = cfg.WaitTimeout
	scfg.MaxLoaders = cfg.MaxLoaders
	scfg.PreloadRatio = cfg.PreloadRatio
	scfg.DefaultStep = cfg.DefaultStep
	scfg.MaxStep = cfg.MaxStep
	scfg.RefreshInterval = cfg.TagRefresh
	scfg.LoadTimeout = cfg.LoadTimeout
	scfg.MaxBatch = cfg.MaxBatch
	scfg.MaxTags = cfg.MaxTags
	scfg.WarmTags = cfg.WarmTags
	scfg.NoWarmStart = cfg.WarmTags == 0
	remainder := filepath.Join(cfg.DataDir, "remainder.json")
	if err := useDataDirRegion(cfg, remainder, log); err != nil {
		return err
	}
	if cfg.segmentOn() { // without segment mode nothing is held, and no store could bind the file
		scfg.RemainderFile = remainder
	}
	ord, fwd, err := openOrdered(ctx, cfg, store, log)
	if err != nil {
		return err
	}
	if ord != nil {
		scfg.Admit = ord.Admit
		scfg.Ordered = ord.List
	}
	seg, err := segment.New(scfg, store, marks, log.Named("segment"))
	if err != nil {
		return fmt.Errorf("segment: %w", err)
	}
	closers = append(closers, seg)
	if ord != nil { // closed before the store: it gives its leases back through it
		ord.Start(ctx, func(tag string) { seg.Retire(tag) })
		closers = append(closers, ord)
	}
	if fwd != nil {
		closers = append(closers, fwd)
	}

	var snow handlers.Snowflakes // nil (no snowflake side) with --modes segment
	if !cfg.snowflakeOn() && (cfg.ZKAddrs != "" || cfg.WorkerID >= 0) {
		log.Info("--modes without snowflake: the worker-id options are ignored and no worker-id source is contacted", zap.String("modes", cfg.Modes))
	}
	if cfg.snowflakeOn() {
		g, snowClose, err := openSnowflake(ctx, cfg, log)
		if err != nil {
			return err
		}
		closers = append(closers, snowClose...)
		snow = g
	}

	idKey, err := readIDKey(cfg.IDKeyFile)
	if err != nil {
		return err
	}
	var shapes segment.Shapes // nil with the segment mode off: no shaped tags
	if cfg.segmentOn() {
		shapes = store
	}
	h := handlers.New(handlers.Config{
		MaxBatch:      cfg.MaxBatch,
		MaxStep:       cfg.MaxStep,
		DisableCreate: !cfg.AllowCreate,
		NoSegment:     !cfg.segmentOn(),
		NoSnowflake:   !cfg.snowflakeOn(),
		Version:       leafdVersion(),
		StoreName:     storeName,
		ConfigValues:  cfg.configValues(),
		Shapes:        shapes,
		IDKey:         idKey,
		Ordered:       ord,
		Forward:       fwd,
		PeriodNow:     periodClock(cfg.PeriodClockOffset),
	}, regionSegments(seg, cfg.region()), snow, log.Named("handlers"))

	rcfg := resp.DefaultConfig()
	rcfg.MaxClients = cfg.MaxClients
	rcfg.IdleTimeout = cfg.IdleTimeout
	if cfg.IdleTimeout == 0 {
		rcfg.IdleTimeout = -1
	}
	rcfg.MaxQueryBuffer = cfg.MaxQueryBuffer
	rcfg.Limits.MaxBulk = cfg.MaxBulk
	rcfg.Limits.MaxMultibulk = cfg.MaxArgs
	rcfg.MaxOutputBuffer = cfg.MaxOutput
	if cfg.MaxOutput == 0 {
		rcfg.MaxOutputBuffer = -1
	}
	rcfg.RequirePass = cfg.RequirePass
	rcfg.TLS = tlsConfig
	rcfg.Model = cfg.ServerModel
	rcfg.LoopSpin = cfg.LoopSpin
	if cfg.LoopSpin == 0 {
		rcfg.LoopSpin = -1
	}
	srv, err := resp.NewServer(rcfg, h, log.Named("resp"))
	if err != nil {
		return err
	}
	h.SetServer(srv)
	// The admin port is bound first so that it is up once the RESP port answers.
	var httpSrv *http.Server
	var httpLn net.Listener
	if cfg.HTTPAddr != "" {
		if httpLn, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return fmt.Errorf("--http-addr: %w", err)
		}
		httpLn = newLimitListener(httpLn, cfg.HTTPMaxClients)
		if cfg.HTTPTLS {
			httpLn = tls.NewListener(httpLn, tlsConfig)
		}
		httpSrv = newHTTPServer(cfg, h, log)
	}
	var addr net.Addr
	if early != nil {
		addr, early, err = srv.ListenOn(early), nil, nil
	} else {
		addr, err = srv.Listen(cfg.Addr)
	}
	if err != nil {
		if httpLn != nil {
			_ = httpLn.Close()
		}
		return fmt.Errorf("listen: %w", err)
	}
	// The accept loops. Each is awaited below, whatever ends the run; its result is read after
	// its done channel is closed, which any number of readers may wait on.
	var serveRes, httpRes error
	serveDone := make(chan struct{})
	go func() {
		defer close(serveDone)
		serveRes = srv.Serve()
	}()
	var httpDone chan struct{} // nil (never ready) without the admin side
	if httpSrv != nil {
		httpDone = make(chan struct{})
		go func() {
			defer close(httpDone)
			httpRes = httpSrv.Serve(httpLn)
		}()
		log.Info("admin HTTP ready", zap.String("http_addr", httpLn.Addr().String()),
			zap.Bool("tls", cfg.HTTPTLS), zap.Bool("auth", cfg.httpToken() != ""),
			zap.Bool("open_probes", cfg.HTTPOpenProbes), zap.Int("maxclients", cfg.HTTPMaxClients))
	}
	stopReadyLog := logStart(log, seg, cfg.segmentOn(), []zap.Field{zap.String("addr", addr.String()), zap.String("store", storeName),
		zap.Int("maxclients", cfg.MaxClients),
		zap.Bool("auto_create", scfg.AutoCreate), zap.String("modes", cfg.Modes), zap.String("data_dir", cfg.DataDir),
		zap.String("version", leafdVersion())})
	defer stopReadyLog() // before the cores close
	if ready != nil {
		ready(addr)
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case <-serveDone:
		err = serveRes
		log.Error("accept loop failed", zap.Error(err))
	case <-httpDone:
		err = fmt.Errorf("admin HTTP: %w", httpRes)
		log.Error("admin HTTP accept loop failed", zap.Error(httpRes))
	}
	// Both front ends stop together, before the deferred closers close the cores.
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	httpStopped := make(chan struct{})
	go func() {
		defer close(httpStopped)
		if httpSrv == nil {
			return
		}
		if herr := httpSrv.Shutdown(sctx); herr != nil {
			log.Warn("admin HTTP shutdown did not finish in time; connections closed", zap.Error(herr))
			_ = httpSrv.Close()
		}
	}()
	if serr := srv.Shutdown(sctx); serr != nil {
		log.Warn("shutdown did not finish in time; connections closed", zap.Error(serr))
	}
	<-httpStopped
	if httpSrv != nil {
		<-httpDone
		if err == nil && !errors.Is(httpRes, http.ErrServerClosed) {
			err = fmt.Errorf("admin HTTP: %w", httpRes)
		}
	}
	<-serveDone
	if err == nil && !errors.Is(serveRes, resp.ErrServerClosed) {
		err = serveRes
	}
	_ = h.Close() // no background store call of the handler outlives the last request
	// After the last reply: the unissued rest of every held tag goes to the remainder file,
	// which the next start of this data dir serves first (docs/SEGMENT.md, "Graceful restart").
	rctx, rcancel := context.WithTimeout(context.Background(), cfg.LoadTimeout)
	if rep, rerr := seg.SaveRemainder(rctx); rerr != nil {
		log.Warn("segment: remainder not saved; the held ranges are a gap", zap.Error(rerr))
	} else if rep.Tags > 0 {
		log.Info("segment: remainder saved", zap.Int("tags", rep.Tags), zap.Int64("ids", rep.IDs))
	}
	rcancel()
	log.Info("stopped")
	return err
}

// newHTTPServer builds the admin server. Its timeouts bound slow clients; a request may wait
// up to --wait-timeout + --load-timeout for a segment (a tag's first load, segment.Config),
// so the write timeout leaves room for that.
func newHTTPServer(cfg Config, h *handlers.Handler, log *zap.Logger) *http.Server {
	return &http.Server{
		Handler: admin.New(admin.Config{
			HTTPAuth:       cfg.httpToken(),
			HTTPOpenProbes: cfg.HTTPOpenProbes,
			MetricsMaxTags: metricsMaxTags(cfg.MetricsMaxTags),
		}, h, log.Named("admin")).Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      max(10*time.Second, cfg.WaitTimeout+cfg.LoadTimeout+5*time.Second),
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
	}
}

// openStore opens the segment store: MySQL when a DSN is given, else the embedded bbolt file.
func openStore(ctx context.Context, cfg Config, log *zap.Logger) (segment.Store, segment.Marks, string, []io.Closer, error) {
	if cfg.MySQLDSN == "" {
		b, err := boltstore.OpenBolt(filepath.Join(cfg.DataDir, "leafd.db"), boltstore.BoltOptions{})
		if err != nil {
			return nil, nil, "", nil, err
		}
		// The marks live apart from leafd.db, so that a restored copy of it is caught.
		marksPath := filepath.Join(cfg.DataDir, "marks.db")
		_, serr := os.Stat(marksPath)
		marksExisted := serr == nil
		marks, err := boltstore.OpenMarkFile(marksPath)
		if err != nil {
			_ = b.Close()
			return nil, nil, "", nil, err
		}
		if n, err := boltstore.MigrateMarks(b, marks); err != nil {
			_ = marks.Close()
			_ = b.Close()
			return nil, nil, "", nil, fmt.Errorf("move the regression marks out of leafd.db: %w", err)
		} else if n > 0 {
			log.Info("segment: regression marks of leafd.db checked into marks.db", zap.Int("tags", n))
		}
		// Refuse leafd.db without its marks: served alone, a restored copy would reissue IDs.
		if what, err := boltstore.PairMarks(b, marks, marksExisted, cfg.AcceptMissingMarks); err != nil {
			_ = marks.Close()
			_ = b.Close()
			return nil, nil, "", nil, fmt.Errorf("%w in %s; if the files are right, raise max_id of every tag above the IDs it issued, then start once with --accept-missing-marks (docs/SEGMENT.md, \"Backup and restore\")", err, cfg.DataDir)
		} else if cfg.AcceptMissingMarks && what != "" {
			log.Warn("segment: "+what, zap.String("data_dir", cfg.DataDir))
		} else if what != "" {
			log.Info("segment: "+what, zap.String("data_dir", cfg.DataDir))
		}
		return b, marks, "embedded", []io.Closer{marks, b}, nil
	}
	return openMySQL(ctx, cfg, log)
}

// openSnowflake builds the worker-id source the flags select and the generator on it.
func openSnowflake(ctx context.Context, cfg Config, log *zap.Logger) (*snowflake.Generator, []io.Closer, error) {
	bits, _ := parseBits(cfg.SnowflakeBits) // validated
	fcfg := snowflake.DefaultConfig()
	fcfg.Layout = snowflake.Layout{
		Epoch:    time.UnixMilli(cfg.SnowflakeEpoch),
		TimeBits: bits[0], WorkerBits: bits[1], SeqBits: bits[2],
	}
	fcfg.SequenceStartZero = cfg.SnowflakeSeq0
	fcfg.MaxBackward = cfg.ClockBackMax
	fcfg.LeaseWindow = cfg.LeaseWindow
	fcfg.MaxStartWait = cfg.StartWaitMax
	fcfg.MaxBatch = cfg.MaxBatch
	// The epoch can only be checked against the clock; name the options in the message.
	if err := fcfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("--snowflake-epoch %d, --snowflake-bits %s: %w", cfg.SnowflakeEpoch, cfg.SnowflakeBits, err)
	}

	var src snowflake.WorkerSource
	// --region: every source but static numbers within the region's ids (region.go).
	base, span, err := regionWorkers(cfg.region(), fcfg.Layout.MaxWorkerID())
	if err != nil {
		return nil, nil, err
	}
	switch cfg.Source() {
	case srcZooKeeper:
		src, err = openZKSource(cfg, span-1, log)
	case srcStatic:
		if cfg.WorkerID < base || cfg.WorkerID >= base+span {
			return nil, nil, fmt.Errorf("--worker-id %d is outside --region %s's worker ids %d..%d", cfg.WorkerID, cfg.region(), base, base+span-1)
		}
		src, err = snowflake.NewStaticSource(cfg.DataDir, cfg.WorkerID)
	case srcMySQL:
		src, err = openMySQLWorkerSource(cfg, span-1, log)
	case srcStatefulSet:
		src, err = openStatefulSetSource(cfg, span-1, log)
	default:
		src, err = snowflake.NewFileSource(cfg.DataDir, 0)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("snowflake worker source: %w", err)
	}
	if cfg.Source() != srcStatic {
		src = inRegion(src, cfg.region(), base, span)
	}
	// The generator owns src from here on: it closes it, on error too.
	g, err := snowflake.New(fcfg, src, log.Named("snowflake"))
	if err != nil {
		return nil, nil, err // begins with "snowflake: "
	}
	return g, []io.Closer{g}, nil
}

// modeOffStore is the segment core's store and marks with --modes snowflake: no tag, nothing
// to lease (the handlers answer DISABLED before anything reaches it).
type modeOffStore struct{}

var errModeOff = errors.New("segment mode is turned off (--modes)")

func (modeOffStore) Allocate(context.Context, string, int64) (segment.Alloc, error) {
	return segment.Alloc{}, errModeOff
}
func (modeOffStore) Tags(context.Context) ([]string, error)    { return nil, nil }
func (modeOffStore) Create(context.Context, segment.Tag) error { return errModeOff }
func (modeOffStore) MaxID(context.Context, string) (int64, error) {
	return 0, segment.ErrNotSupported
}
func (modeOffStore) CheckTag(context.Context, string) error { return segment.ErrNotSupported }
func (modeOffStore) CreateShape(context.Context, string, []byte) error {
	return segment.ErrNotSupported
}
func (modeOffStore) LoadShape(context.Context, string) ([]byte, error) {
	return nil, segment.ErrNotSupported
}
func (modeOffStore) ShapeTags(context.Context) ([]string, error) { return nil, segment.ErrNotSupported }
func (modeOffStore) Mark(string) (int64, error)                  { return 0, nil }
func (modeOffStore) Raise(string, int64) error                   { return errModeOff }

// RaiseHint, Hint and the listings: nothing to remember or list (segment.ErrNotSupported).
func (modeOffStore) RaiseHint(string, int64, segment.Hint) error { return segment.ErrNotSupported }
func (modeOffStore) Hint(string) (segment.Hint, error) {
	return segment.Hint{}, segment.ErrNotSupported
}
func (modeOffStore) AllMarks() ([]segment.Mark, error) { return nil, segment.ErrNotSupported }
func (modeOffStore) MarksAfter(string, int) ([]segment.Mark, error) {
	return nil, segment.ErrNotSupported
}
func (modeOffStore) RecentTags(int) ([]string, error) { return nil, segment.ErrNotSupported }
