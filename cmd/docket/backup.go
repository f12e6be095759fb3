package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/ledger/postgres"
)

func init() {
	register("backup", "write a consistent backup of the data directory (stdout or --out FILE)", func(env Env) command { return &backupCmd{env: env} })
	register("restore", "restore a backup into a new or empty data directory", func(env Env) command { return &restoreCmd{env: env} })
}

// backupCmd is `docket backup [--data DIR] [--out FILE]`.
type backupCmd struct{ env Env }

func (c *backupCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("backup", "backup [--data DIR] [--out FILE] [--encryption-key-file FILE]", c.env.Stderr)
	data := fs.String("data", defaultDataDir, "data directory (the ledger) to back up")
	key := ledgerFlag(fs, data, c.env.Getenv)
	out := fs.String("out", "", "write the backup to this file (written whole, then renamed into place; default: stdout)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("backup takes no positional arguments (got %q)", pos)
	}
	if postgres.IsURL(*data) {
		return usageError("the shared ledger lives in PostgreSQL: back it up with PostgreSQL's own tools, e.g. pg_dump --format=custom --schema=docket --file docket.dump 'postgres://…' (restore with pg_restore)")
	}
	l, err := openRecorded(ctx, *data, key, c.env.Stderr)
	if err != nil {
		return err
	}
	defer l.Close()
	b, ok := l.(ledger.Backuper)
	if !ok {
		return fmt.Errorf("backing up %s: this ledger cannot write backups", *data)
	}
	if *out == "" {
		if err := b.Backup(ctx, c.env.Stdout); err != nil {
			return fmt.Errorf("backing up %s: %w", *data, err)
		}
		return nil
	}
	if err := writeFileAtomic(*out, func(w io.Writer) error { return b.Backup(ctx, w) }); err != nil {
		return fmt.Errorf("backing up %s to %s: %w", *data, *out, err)
	}
	return nil
}

// writeFileAtomic writes path through a temporary sibling that is synced and
// renamed into place, so path is either absent, as before, or complete.
func writeFileAtomic(path string, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := write(f); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// restoreCmd is `docket restore --data DIR [--in FILE]`.
type restoreCmd struct{ env Env }

func (c *restoreCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("restore", "restore --data DIR [--in FILE] [--encryption-key-file FILE]", c.env.Stderr)
	data := fs.String("data", "", "new or empty data directory to restore into (required; never overwritten)")
	key := ledgerFlag(fs, data, c.env.Getenv)
	in := fs.String("in", "", "read the backup from this file (default: stdin)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("restore takes no positional arguments (got %q)", pos)
	}
	if postgres.IsURL(*data) {
		return usageError("the shared ledger lives in PostgreSQL: docket backup files restore into a data directory (--data DIR); restore a pg_dump of the shared ledger with PostgreSQL's own tools, e.g. pg_restore --dbname 'postgres://…' docket.dump")
	}
	if *data == "" {
		fs.Usage()
		return usageError("restore needs --data DIR (a new or empty directory)")
	}
	var r io.Reader = c.env.Stdin
	if *in != "" {
		f, err := os.Open(*in)
		if err != nil {
			return usageError("reading backup: %v", err)
		}
		defer f.Close()
		r = f
	}
	// With a key the backup is decrypted with it (if it is encrypted) and
	// the new directory is encrypted with it: a plain backup restored with
	// a key is how a plain directory is encrypted.
	k, err := key.load()
	if err != nil {
		return err
	}
	err = badgerdb.Restore(ctx, *data, r, badgerdb.Config{Logger: cliLogger(c.env.Stderr), Key: k})
	switch {
	case errors.Is(err, ledger.ErrKey):
		return keyError(fmt.Errorf("restoring into %s: %w", *data, err))
	case err == nil:
		fmt.Fprintf(c.env.Stderr, "restored into %s\n", *data)
		return nil
	case errors.Is(err, badgerdb.ErrNotEmpty),
		errors.Is(err, ledger.ErrFormat),
		errors.Is(err, badgerdb.ErrCorrupt),
		errors.Is(err, ledger.ErrInvalid):
		return withCode(exitBad, fmt.Errorf("restoring into %s: %w", *data, err))
	}
	return fmt.Errorf("restoring into %s: %w", *data, err)
}
