package badgerdb

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/masterkey"
)

// Encryption at rest is Badger's own: with Config.Key set, every table,
// value-log and write-ahead-log file is encrypted with AES in CTR mode under
// data keys that Badger makes and rotates (Config.DataKeyRotation); the data
// keys are kept in the directory's key registry, encrypted with the master
// key. The registry begins with a 16-byte IV and a 12-byte sanity text
// ("Hello Badger", encrypted with the master key when there is one), which is
// how Open tells a plain directory from an encrypted one, and a wrong key
// from a missing one, before Badger writes anything.

// registry is what a directory's key registry says about its encryption.
type registry int

const (
	registryAbsent    registry = iota // a new directory
	registryPlain                     // not encrypted
	registryEncrypted                 // encrypted; the key was not checked
	registryMatches                   // encrypted with the given key
)

const sanityText = "Hello Badger"

// readRegistry reads dir's key registry and, when it is encrypted and key is
// valid, checks key against it.
func readRegistry(dir string, key masterkey.Key) (registry, error) {
	f, err := os.Open(filepath.Join(dir, badger.KeyRegistryFileName))
	if errors.Is(err, os.ErrNotExist) {
		return registryAbsent, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ledger: reading the key registry of %s: %w", dir, err)
	}
	defer f.Close()
	var head [aes.BlockSize + len(sanityText)]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return 0, fmt.Errorf("ledger: the key registry of %s is cut short (%v): it is not a Badger directory this build can open", dir, err)
	}
	iv, sanity := head[:aes.BlockSize], head[aes.BlockSize:]
	if string(sanity) == sanityText {
		return registryPlain, nil
	}
	if !key.Valid() {
		return registryEncrypted, nil
	}
	block, err := aes.NewCipher(key.Bytes())
	if err != nil {
		return 0, fmt.Errorf("ledger: %w", err)
	}
	plain := make([]byte, len(sanity))
	cipher.NewCTR(block, iv).XORKeyStream(plain, sanity)
	if string(plain) == sanityText {
		return registryMatches, nil
	}
	return registryEncrypted, nil
}

// checkKey refuses, before Badger opens dir, a key that does not fit it:
// an encrypted directory without a key or with another key, a plain
// directory with a key. Errors: ledger.ErrKey; nothing is written.
func checkKey(dir string, key masterkey.Key) error {
	reg, err := readRegistry(dir, key)
	if err != nil {
		return err
	}
	switch {
	case reg == registryEncrypted && !key.Valid():
		return fmt.Errorf("%w: the data directory %s is encrypted and no key was given: give the key it was encrypted with", ledger.ErrKey, dir)
	case reg == registryEncrypted:
		return fmt.Errorf("%w: the data directory %s is encrypted with another key than the one given (%s); nothing was read or written", ledger.ErrKey, dir, key.ID())
	case reg == registryPlain && key.Valid():
		return fmt.Errorf("%w: the data directory %s is not encrypted, and an encryption key was given: open it without a key, "+
			"or encrypt it by backing it up and restoring the backup with the key into a new directory; nothing was changed", ledger.ErrKey, dir)
	}
	return nil
}

// Rekey rewrites the key registry of the data directory dir so that it is
// encrypted with newKey instead of oldKey: the master key's rotation. Only
// the registry (the data keys, encrypted with the master key) is rewritten,
// into a new file that is synced and renamed over the old one, so an
// interrupted Rekey leaves the directory under one of the two keys, whole;
// running Rekey again finishes it (a directory already under newKey is
// success). The directory must not be open (its lock is taken). Errors:
// ledger.ErrKey (the directory is not encrypted, or oldKey is not its key),
// ledger.ErrLocked, ledger.ErrInvalid.
func Rekey(ctx context.Context, dir string, oldKey, newKey masterkey.Key) error {
	if dir == "" || !oldKey.Valid() || !newKey.Valid() {
		return fmt.Errorf("%w: Rekey needs a directory, its key and a new key", ledger.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("%w: %s is not a data directory", ledger.ErrInvalid, dir)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	reg, err := readRegistry(dir, newKey)
	if err != nil {
		return err
	}
	switch reg {
	case registryAbsent:
		return fmt.Errorf("%w: %s holds no ledger", ledger.ErrInvalid, dir)
	case registryMatches:
		return nil // done already (an earlier Rekey was interrupted after its rename, or ran twice)
	}
	if err := checkKey(dir, oldKey); err != nil {
		return err
	}
	reg2, err := badger.OpenKeyRegistry(badger.KeyRegistryOptions{Dir: dir, ReadOnly: true, EncryptionKey: oldKey.Bytes()})
	if err != nil {
		return fmt.Errorf("ledger: reading the key registry of %s: %w", dir, err)
	}
	if err := rekeyHook(); err != nil {
		return err
	}
	if err := badger.WriteKeyRegistry(reg2, badger.KeyRegistryOptions{Dir: dir, EncryptionKey: newKey.Bytes()}); err != nil {
		return fmt.Errorf("ledger: writing the key registry of %s: %w", dir, translate(err))
	}
	return nil
}

// rekeyHook runs between reading and writing the registry (tests).
var rekeyHook = func() error { return nil }
