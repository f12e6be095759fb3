package clientgen

// The generated client (docketclient, written by the test) imports
// oapi-codegen's runtime: this import keeps it, at the version pinned here,
// in go.mod and go.sum while the client does not exist yet.
import _ "github.com/oapi-codegen/runtime"
