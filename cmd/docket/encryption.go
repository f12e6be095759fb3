package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	"github.com/docketrun/docket/ledger/masterkey"
	"github.com/docketrun/docket/ledger/postgres"
)

func init() {
	register("keygen", "print a new encryption key for the ledger (64 hexadecimal digits; keep it in a file readable only by you)", func(env Env) command { return &keygenCmd{env: env} })
	register("rekey", "move an encrypted ledger to a new encryption key (the master key's rotation)", func(env Env) command { return &rekeyCmd{env: env} })
}

// keyFileFlag names the flag every command that opens the ledger takes.
const keyFileFlag = "encryption-key-file"

// ledgerKey is where a command finds the ledger's encryption key:
// --encryption-key-file FILE, else $DOCKET_ENCRYPTION_KEY, else none (the
// ledger is not encrypted). The key is read when the ledger is opened.
type ledgerKey struct {
	file   string
	getenv func(string) string
}

// addKeyFlag adds --encryption-key-file to fs.
func addKeyFlag(fs *flag.FlagSet, getenv func(string) string) *ledgerKey {
	k := &ledgerKey{getenv: getenv}
	fs.StringVar(&k.file, keyFileFlag, "", "file holding the ledger's encryption key (docket keygen); with --ledger, its keyring: the current key first, older ones after it (default $"+masterkey.Env+"; none: not encrypted)")
	return k
}

// envKey is the key of a command without the flag: $DOCKET_ENCRYPTION_KEY.
func envKey(getenv func(string) string) *ledgerKey { return &ledgerKey{getenv: getenv} }

// keyring reads the keys (the shared ledger's keyring: the current key
// first, older ones after it); a nil ledgerKey has none. A malformed key or
// an unreadable file is bad input (exit 2); the message never shows a key.
func (k *ledgerKey) keyring() (*masterkey.Keyring, error) {
	if k == nil {
		return nil, nil
	}
	kr, err := masterkey.LoadKeyring(k.file, k.getenv)
	if err != nil {
		return nil, withCode(exitBad, err)
	}
	return kr, nil
}

// load reads the key of a data directory: one key (zero: none).
func (k *ledgerKey) load() (masterkey.Key, error) {
	kr, err := k.keyring()
	if err != nil || kr == nil {
		return masterkey.Key{}, err
	}
	if kr.Len() > 1 {
		return masterkey.Key{}, usageError("the encryption key file or $%s holds %d keys: a data directory is encrypted with one key (move it to a new key with docket rekey)", masterkey.Env, kr.Len())
	}
	return kr.Current(), nil
}

// keyError explains a key that does not fit the ledger (exit 2): where
// the key comes from and what to do. Other errors pass through.
func keyError(err error) error {
	if !errors.Is(err, ledger.ErrKey) {
		return err
	}
	return withCode(exitBad, fmt.Errorf("%w (the key comes from --%s FILE or $%s)", err, keyFileFlag, masterkey.Env))
}

// keygenCmd is `docket keygen [--out FILE]`.
type keygenCmd struct{ env Env }

func (c *keygenCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("keygen", "keygen [--out FILE]", c.env.Stderr)
	out := fs.String("out", "", "write the key to this new file (mode 0600; refused if it exists) instead of stdout")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("keygen takes no positional arguments (got %q)", pos)
	}
	k, err := masterkey.Generate()
	if err != nil {
		return err
	}
	if *out == "" {
		fmt.Fprintln(c.env.Stdout, k.Hex())
		return nil
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return usageError("writing the key: %v (keygen never overwrites a key file)", err)
	}
	if _, err := fmt.Fprintln(f, k.Hex()); err != nil {
		f.Close()
		os.Remove(*out)
		return fmt.Errorf("writing the key to %s: %w", *out, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(*out)
		return fmt.Errorf("writing the key to %s: %w", *out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the key to %s: %w", *out, err)
	}
	fmt.Fprintf(c.env.Stderr, "wrote key %s to %s\n", k.ID(), *out)
	return nil
}

// rekeyCmd is `docket rekey --data DIR --encryption-key-file OLD
// --new-key-file NEW`, and `docket rekey --ledger URL
// --encryption-key-file RING` for the shared ledger.
type rekeyCmd struct{ env Env }

func (c *rekeyCmd) Run(ctx context.Context, args []string) error {
	fs := newFlags("rekey", "rekey [--data DIR] [--encryption-key-file OLD] --new-key-file NEW | rekey --ledger URL [--encryption-key-file RING]", c.env.Stderr)
	data := fs.String("data", defaultDataDir, "data directory to move to the new key (no process may have it open)")
	oldKey := ledgerFlag(fs, data, c.env.Getenv)
	newFile := fs.String("new-key-file", "", "file holding the new key (docket keygen --out NEW); a data directory only")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("rekey takes no positional arguments (got %q)", pos)
	}
	if postgres.IsURL(*data) {
		if *newFile != "" {
			return usageError("the shared ledger takes its new key as the first key of its keyring (--%s RING: the new key first, the old ones after it), not --new-key-file", keyFileFlag)
		}
		return c.reseal(ctx, *data, oldKey)
	}
	if *newFile == "" {
		fs.Usage()
		return usageError("rekey needs --new-key-file NEW (make one with docket keygen --out NEW)")
	}
	if err := dataDirExists(*data); err != nil {
		return err
	}
	old, err := oldKey.load()
	if err != nil {
		return err
	}
	if !old.Valid() {
		return usageError("rekey needs the directory's current key: --%s OLD or $%s", keyFileFlag, masterkey.Env)
	}
	nk, err := masterkey.Read(*newFile)
	if err != nil {
		return withCode(exitBad, err)
	}
	err = badgerdb.Rekey(ctx, *data, old, nk)
	switch {
	case errors.Is(err, ledger.ErrLocked):
		return withCode(exitBusy, fmt.Errorf("data directory %s is busy: another docket process holds it (%w); stop it and rekey again", *data, err))
	case err != nil:
		return keyError(fmt.Errorf("rekeying %s: %w", *data, err))
	}
	fmt.Fprintf(c.env.Stderr, "%s is now encrypted with key %s: open it with --%s %s; the old key no longer opens it\n", *data, nk.ID(), keyFileFlag, *newFile)
	return nil
}

// reseal moves every value of the shared ledger to its keyring's current
// key (postgres.Store.Reseal).
func (c *rekeyCmd) reseal(ctx context.Context, url string, key *ledgerKey) error {
	kr, err := key.keyring()
	if err != nil {
		return err
	}
	if kr == nil {
		return usageError("rekey needs the keyring: --%s RING or $%s (the new key first, the old ones after it)", keyFileFlag, masterkey.Env)
	}
	s, err := openSharedLedger(ctx, postgres.Config{URL: url, Logger: cliLogger(c.env.Stderr), Keyring: kr})
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := s.Reseal(ctx)
	if err != nil {
		return keyError(fmt.Errorf("resealing the shared ledger %s: %w", postgres.Redact(url), err))
	}
	if st.Left > 0 {
		return fmt.Errorf("resealed %d values and sealed %d plaintext ones; %d changed meanwhile under another key: restart every node with the new keyring and run rekey again", st.Resealed, st.Sealed, st.Left)
	}
	fmt.Fprintf(c.env.Stderr, "resealed %d values under key %s and sealed %d plaintext ones: the keyring's other keys may now be removed\n", st.Resealed, kr.Current().ID(), st.Sealed)
	return nil
}
