package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A fresh data directory is a copy of one made by mariadb-install-db for the same server
// binary and options: installing takes some 5–10 s on a loaded machine (it bootstraps a
// server and fsyncs the system tables), a copy of the 25 MB well under one. The template is
// kept beside the other temporary files, named by a hash of what it depends on, so that
// every test process and run on the machine reuses it; it is made in a directory of its
// own and renamed into place, so that concurrent processes never see half of one.
//
// The copy starts from the state a fresh install leaves: the same system tables, no binlog,
// no relay log, no Galera state; server ids and ports are the options of each start.

// installDataDir makes datadir a fresh data directory for server (mariadbd) installed by
// install (mariadb-install-db) with args (without --datadir).
func installDataDir(install, server, datadir string, args []string) error {
	tmpl, err := dataDirTemplate(install, server, args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "cp", "-a", tmpl, datadir).CombinedOutput(); err != nil {
		return fmt.Errorf("testenv: copy of the data directory template %s: %v\n%s", tmpl, err, out)
	}
	return nil
}

// dataDirTemplate returns the template for install, server and args, making it if needed.
func dataDirTemplate(install, server string, args []string) (string, error) {
	h := sha256.New()
	for _, p := range []string{install, server} {
		fi, err := os.Stat(p)
		if err != nil {
			return "", fmt.Errorf("testenv: %v", err)
		}
		fmt.Fprintf(h, "%s %d %d\n", p, fi.Size(), fi.ModTime().UnixNano())
	}
	fmt.Fprintf(h, "%d %s\n", os.Geteuid(), strings.Join(args, " "))
	tmpl := filepath.Join(os.TempDir(), "leafd-mariadb-template-"+hex.EncodeToString(h.Sum(nil))[:16])
	if _, err := os.Stat(filepath.Join(tmpl, "mysql")); err == nil {
		return tmpl, nil
	}
	work, err := os.MkdirTemp("", "leafd-mariadb-install-")
	if err != nil {
		return "", fmt.Errorf("testenv: %v", err)
	}
	defer os.RemoveAll(work)
	datadir, tmpdir := filepath.Join(work, "data"), filepath.Join(work, "tmp")
	if err := os.Mkdir(tmpdir, 0o700); err != nil {
		return "", fmt.Errorf("testenv: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A private tmpdir: concurrent installs have removed each other's temporary tables in a
	// shared /tmp.
	argv := append(slices.Clone(args), "--datadir="+datadir, "--tmpdir="+tmpdir)
	if out, err := exec.CommandContext(ctx, install, argv...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("testenv: %s: %v\n%s", install, err, out)
	}
	if err := os.Rename(datadir, tmpl); err != nil {
		// Another process put its template in place first: use that one.
		if _, serr := os.Stat(filepath.Join(tmpl, "mysql")); serr == nil {
			return tmpl, nil
		}
		return "", fmt.Errorf("testenv: data directory template: %v", err)
	}
	return tmpl, nil
}
