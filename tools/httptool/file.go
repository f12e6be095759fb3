package httptool

import (
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
	"github.com/docketrun/docket/tools/toolsfile"
)

// DefaultTimeout is a tool's call timeout when the file sets none.
const DefaultTimeout = toolsfile.DefaultTimeout

// DefaultMaxResponseBytes caps how much of a response is read (8 MiB). A 2xx
// response beyond it is a definite failure wrapping tools.ErrOutputTooLarge
// (the effect happened; calling again would give the same answer).
const DefaultMaxResponseBytes = 8 << 20

// DefaultMaxIdleConnsPerHost is how many idle connections the default client
// keeps per host, so that parallel actions against one API reuse them.
const DefaultMaxIdleConnsPerHost = 100

// File is a tools file (parsed by toolsfile) with its HTTP tools built.
type File struct {
	Version int
	// Tools are the HTTP tools, in file order. Tools with a lookup block also
	// implement tools.Looker.
	Tools []tools.Tool
	// MCPServers are the file's mcp_servers entries, checked but not
	// connected (tools/mcptool connects them).
	MCPServers []toolsfile.MCPServer
	// Warnings are the file's warnings (toolsfile.File.Warnings).
	Warnings []toolsfile.Problem
	// Policy holds the file's global policy rules (toolsfile.File.Policy).
	Policy []policy.Rule
	// Budgets holds the file's budgets (toolsfile.File.Budgets).
	Budgets []policy.Budget

	client *http.Client
}

// Known reports whether the file defines tool name: one of its HTTP tools,
// or "server.tool" of one of its MCP servers.
func (f *File) Known(name string) bool {
	for _, t := range f.Tools {
		if t.Spec().Name == name {
			return true
		}
	}
	srv, _, ok := strings.Cut(name, ".")
	return ok && slices.ContainsFunc(f.MCPServers, func(s toolsfile.MCPServer) bool { return s.Name == srv })
}

// CloseIdleConnections closes the idle connections of the HTTP client the
// file's tools share (when done with them, or in tests).
func (f *File) CloseIdleConnections() { f.client.CloseIdleConnections() }

// Options configures how the tools call. Every field is optional.
type Options struct {
	// Env reads environment variables when parsing a file. Default: os.Getenv.
	Env func(string) string
	// Client sends the requests. Default: a client that does not follow
	// redirects, over a clone of http.DefaultTransport keeping
	// DefaultMaxIdleConnsPerHost idle connections per host.
	Client *http.Client
	// Now is the clock used for HTTP-date Retry-After values. Default: time.Now.
	Now func() time.Time
	// MaxResponseBytes caps the response size. Default: DefaultMaxResponseBytes.
	MaxResponseBytes int64
}

func (o Options) withDefaults() Options {
	if o.Env == nil {
		o.Env = os.Getenv
	}
	if o.Client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Many actions in flight often call the same API: keep their
		// connections (the default keeps 2 per host and closes the rest).
		t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
		o.Client = &http.Client{
			Transport:     t,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	return o
}

// Load reads a tools file with toolsfile.Load and builds its HTTP tools (see
// Parse).
func Load(path string, env func(string) string) (*File, error) {
	return LoadOptions(path, Options{Env: env})
}

// LoadOptions is Load with options.
func LoadOptions(path string, opts Options) (*File, error) {
	opts = opts.withDefaults()
	tf, err := toolsfile.Load(path, &toolsfile.Options{Env: opts.Env})
	if err != nil {
		return nil, err
	}
	return build(tf, opts), nil
}

// Parse parses a tools file with toolsfile.Parse (which reports every
// problem at once in a *toolsfile.LoadError) and builds its HTTP tools. env
// reads the environment for {{env "NAME"}} (nil: os.Getenv).
func Parse(data []byte, env func(string) string) (*File, error) {
	return ParseOptions(data, Options{Env: env})
}

// ParseOptions is Parse with options.
func ParseOptions(data []byte, opts Options) (*File, error) {
	opts = opts.withDefaults()
	tf, err := toolsfile.Parse(data, &toolsfile.Options{Env: opts.Env})
	if err != nil {
		return nil, err
	}
	return build(tf, opts), nil
}

// Build makes the tools of a parsed file, sharing one HTTP client.
func Build(f *toolsfile.File, opts Options) *File {
	return build(f, opts.withDefaults())
}

func build(f *toolsfile.File, opts Options) *File {
	out := &File{Version: f.Version, MCPServers: f.MCPServers, Warnings: f.Warnings, Policy: f.Policy, Budgets: f.Budgets, client: opts.Client}
	for _, def := range f.Tools {
		out.Tools = append(out.Tools, newTool(def, opts))
	}
	return out
}

// New makes a callable tool of one tool definition: a *Tool, or a
// *LookupTool when it has a lookup block.
func New(def *toolsfile.Tool, opts Options) tools.Tool {
	return newTool(def, opts.withDefaults())
}

func newTool(def *toolsfile.Tool, o Options) tools.Tool {
	t := &Tool{def: def, client: o.Client, now: o.Now, max: o.MaxResponseBytes,
		names: newArgNames(def.Spec.InputSchema), hidden: hiddenValues(def)}
	if def.Lookup != nil {
		return &LookupTool{t}
	}
	return t
}
