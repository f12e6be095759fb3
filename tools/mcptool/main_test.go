package mcptool

import (
	"testing"

	"go.uber.org/goleak"
)

// Every session's goroutines and every server process end when the Set is
// closed: no goroutine may outlive the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the shared HTTP transport (the
		// streamable HTTP test's proxy and client).
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}
