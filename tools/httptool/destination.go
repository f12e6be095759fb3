package httptool

import (
	"context"
	"net"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/toolsfile"
)

// Destination is where a call would go, resolved from its arguments, for
// the person who approves it: the template shows "{{env \"API\"}}/users/{{.id}}",
// the destination "https://api.example.com:443" and "/users/42".
type Destination struct {
	Method string `json:"method"`
	// Origin is scheme://host:port, the port always written (443 and 80
	// for https and http when the URL has none). Shown in full, also when
	// it comes from an environment value: it is where the tool's headers go.
	Origin string `json:"origin"`
	// Path is the URL path as sent (escaped; "/" when empty), with every
	// environment value and credential typed into the file redacted. The
	// query is left out: it may carry credentials.
	Path string `json:"path"`
}

// Destination resolves where call would go, checking it as Call does (the
// arguments' names, and that they keep the URL's origin and make no dot or
// empty path segment) and sending nothing. Its error is Call's, a
// tools.Permanent naming the argument; an error wrapping
// toolsfile.ErrURLArgument means an argument would change where the
// request goes.
func (t *Tool) Destination(call tools.Call) (Destination, error) {
	return t.destination(t.def.Request, call, true)
}

// LookupDestination is Destination for the lookup request.
func (t *LookupTool) LookupDestination(call tools.Call) (Destination, error) {
	return t.destination(t.def.Lookup.Request, call, false)
}

func (t *Tool) destination(r *toolsfile.Request, call tools.Call, isCall bool) (Destination, error) {
	req, err := t.build(context.Background(), r, call, isCall)
	if err != nil {
		return Destination{}, err
	}
	port := req.URL.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[req.URL.Scheme]
	}
	path := req.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	return Destination{
		Method: r.Method,
		Origin: req.URL.Scheme + "://" + net.JoinHostPort(req.URL.Hostname(), port),
		Path:   t.redact(path),
	}, nil
}
