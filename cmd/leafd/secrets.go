package main

import (
	"fmt"
	"os"
	"strings"
)

// Secrets (the RESP password, the admin token, the MySQL DSN) given as flags are visible to
// every local user through ps and /proc/<pid>/cmdline. The environment (LEAFD_REQUIREPASS,
// LEAFD_HTTP_AUTH, LEAFD_MYSQL_DSN) and the *-file options are not; the README says to prefer
// them, and a secret given as a flag is warned about at start.

// readSecrets replaces each secret by the content of its file option, when given.
func (c *Config) readSecrets() error {
	for _, s := range []struct {
		flag, fileFlag, file string
		dst                  *string
	}{
		{"--requirepass", "--requirepass-file", c.RequirePassFile, &c.RequirePass},
		{"--mysql-dsn", "--mysql-dsn-file", c.MySQLDSNFile, &c.MySQLDSN},
		{"--http-auth", "--http-auth-file", c.HTTPAuthFile, &c.HTTPAuth},
	} {
		if s.file == "" {
			continue
		}
		if *s.dst != "" {
			return fmt.Errorf("%s and %s exclude each other", s.flag, s.fileFlag)
		}
		b, err := os.ReadFile(s.file)
		if err != nil {
			return fmt.Errorf("%s: %w", s.fileFlag, err)
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" || strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("%s %s: want one non-empty line", s.fileFlag, s.file)
		}
		*s.dst = v
	}
	return nil
}

// httpToken is the token the admin port requires: --http-auth, else the RESP password, else
// none. A client of the admin port in this binary (a health check) reads it the same way.
func (c Config) httpToken() string {
	if c.HTTPAuth != "" {
		return c.HTTPAuth
	}
	return c.RequirePass
}
