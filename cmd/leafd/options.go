package main

// Where options come from, for the server and the admin tools alike: the command line, then
// the LEAFD_* environment, then the --config file (LEAFD_CONFIG). Nothing unknown is ignored:
// an unknown flag, config name or LEAFD_* variable is refused with the nearest known name, and
// a bad value is one sentence naming the option, the form it wants and its default.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// notOption reports whether a LEAFD_ variable is one the project's own tests, benchmarks and
// scripts set (docs/OPERATIONS.md): a leafd they start inherits it, and it is never an option.
func notOption(name string) bool {
	if strings.HasPrefix(name, "LEAFD_TEST_") || strings.HasPrefix(name, "LEAFD_BENCH_") {
		return true
	}
	switch name {
	case "LEAFD_HOT_BENCH", "LEAFD_REFILL_BENCH", "LEAFD_UPDATE_DOCS", // tests' switches
		"LEAFD_BIN", "LEAFD_ENV", "LEAFD_FLAGS", "LEAFD_XFLAGS", // bench/*.sh
		"LEAFD_IMAGE", "LEAFD_IMAGE_TOOL", "LEAFD_IMAGE_CONTEXT": // scripts/image.sh, compose
		return true
	}
	return false
}

// optionEnvNames lists the environment variable of every server option, LEAFD_CONFIG included.
func optionEnvNames() []string {
	names := []string{envName("config")}
	flagSet(&Config{}).VisitAll(func(f *flag.Flag) { names = append(names, envName(f.Name)) })
	return names
}

// checkEnviron refuses every LEAFD_ variable of environ (KEY=value entries) that is no option
// and not one of the project's own (notOption), naming the nearest option's variable: a
// misspelled LEAFD_MYSQL_DSN must not start the server on the embedded store.
func checkEnviron(environ []string) error {
	known := optionEnvNames()
	var errs []error
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "LEAFD_") || notOption(name) || slices.Contains(known, name) {
			continue
		}
		errs = append(errs, fmt.Errorf("unknown environment variable %s (did you mean %s?): every LEAFD_ variable is an option, LEAFD_ and the flag's name in upper case with '_' for '-' (leafd --help lists the flags)",
			name, nearest(name, known)))
	}
	return errors.Join(errs...)
}

// nearest is the candidate closest to s by edit distance (insertions, deletions, substitutions
// and swaps of neighbours), the first of equals.
func nearest(s string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		if d := editDistance(s, c); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// checkedValue is a flag's value that, when a value does not parse, keeps the error
// expected() words (the flag package alone says "parse error").
type checkedValue struct {
	flag.Value
	f   *flag.Flag
	bad *error
}

func (v checkedValue) Set(s string) error {
	if err := v.Value.Set(s); err != nil {
		*v.bad = fmt.Errorf("--%s %q: %s", v.f.Name, s, expected(v.f))
		return *v.bad
	}
	return nil
}

// String is the value's; the flag package also calls it on a zero checkedValue (to tell a
// default from the zero value when it prints the usage), which has no Value.
func (v checkedValue) String() string {
	if v.Value == nil {
		return ""
	}
	return v.Value.String()
}

func (v checkedValue) Get() any { return v.Value.(flag.Getter).Get() }

func (v checkedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// parseArgs parses args into fs. A bad value or an unknown flag is one sentence (the value's
// expected form and default; the nearest flag), without the usage, which only --help prints
// (usage, to stderr; the result is then flag.ErrHelp).
func parseArgs(fs *flag.FlagSet, args []string, stderr io.Writer, usage func()) error {
	var bad error
	fs.VisitAll(func(f *flag.Flag) { f.Value = checkedValue{Value: f.Value, f: f, bad: &bad} })
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		usage()
		return err
	case bad != nil:
		return bad
	}
	if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
		var flags []string
		fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f.Name) })
		return fmt.Errorf("unknown flag --%s (did you mean --%s?); --help lists the flags", name, nearest(name, flags))
	}
	return fmt.Errorf("%v; --help lists the flags", err)
}

// applyLayers sets every flag of fs that the command line did not set (onCmdline) and that
// share accepts from its LEAFD_ variable, else from the config file (configPath, else
// LEAFD_CONFIG), whose names are checked against the server's options. The server and the
// admin tools both come here: one code path for the environment and the config file.
func applyLayers(fs *flag.FlagSet, onCmdline map[string]bool, share func(string) bool, getenv func(string) string, configPath string) error {
	if configPath == "" {
		configPath = getenv(envName("config"))
	}
	fileVals := map[string]string{}
	if configPath != "" {
		var err error
		if fileVals, err = readConfigFile(configPath, flagSet(&Config{})); err != nil {
			return err
		}
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if onCmdline[f.Name] || f.Name == "config" || f.Name == "version" || !share(f.Name) {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %s (--%s)", envName(f.Name), v, expected(f), f.Name))
			}
			return
		}
		if v, ok := fileVals[f.Name]; ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %s %q: %s", configPath, f.Name, v, expected(f)))
			}
		}
	})
	return errors.Join(errs...)
}

// shareOptions declares on an admin tool's flag set the server options it shares, with the
// server's own declaration (name, default, help), bound to c; loadShared fills them.
func shareOptions(fs *flag.FlagSet, c *Config, names ...string) {
	srv := flagSet(c)
	for _, n := range names {
		f := srv.Lookup(n)
		fs.Var(f.Value, f.Name, f.Usage)
	}
}

// loadShared parses an admin tool's args and fills the options it shares with the server
// (names, declared by shareOptions) from the server's environment and config file, then reads
// their *-file secrets as the server does. The tool's own options come from args alone (its
// --timeout is not the server's LEAFD_TIMEOUT).
func loadShared(fs *flag.FlagSet, c *Config, names []string, args []string, getenv func(string) string, stderr io.Writer, usage func()) error {
	if err := parseArgs(fs, args, stderr, usage); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	onCmdline := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCmdline[f.Name] = true })
	share := func(n string) bool { return slices.Contains(names, n) }
	if err := applyLayers(fs, onCmdline, share, getenv, ""); err != nil {
		return err
	}
	return c.readSecrets()
}
