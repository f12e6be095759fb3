package ledger

import "errors"

// ErrKey: the ledger's encryption key is missing, wrong or malformed, or was
// given for a ledger that is not encrypted. Nothing was read or written. The
// error says which, never the key (ledger/README.md, Encryption at rest).
var ErrKey = errors.New("ledger: encryption key")
