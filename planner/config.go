package planner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/docketrun/docket/tools"
)

// Mode is how the model is asked for a plan.
type Mode string

const (
	// ModeTools uses native tool calling: read_only tools run while the model
	// thinks, every other call is queued as a plan action. The default.
	ModeTools Mode = "tools"
	// ModeJSONSchema asks for the whole plan as one JSON object through
	// response_format json_schema, for models without tool calling.
	ModeJSONSchema Mode = "json_schema"
)

// Order is how ModeTools orders queued actions that pass no data to each
// other (the package doc's "Order").
type Order string

const (
	// OrderTurns (the default): a call made in a later model message depends
	// on the actions queued by the most recent earlier message that queued
	// any (and so, transitively, on every earlier one), besides the actions
	// its arguments reference. Calls made together in one message stay
	// independent.
	OrderTurns Order = "turns"
	// OrderReferences: only references order actions (docket before issue 18).
	OrderReferences Order = "references"
)

// Switch is a setting that is automatic by default and can be forced.
type Switch string

// Switch values (Config.Strict, Config.Stream).
const (
	StrictAuto Switch = "auto"
	StrictOff  Switch = "off"
	StreamAuto Switch = "auto"
	StreamOn   Switch = "on"
	StreamOff  Switch = "off"
)

// Config.ToolChoice values.
const (
	ToolChoiceAuto     = "auto"
	ToolChoiceRequired = "required"
)

// DefaultBaseURL is the OpenAI API, used when neither Config.BaseURL nor
// OPENAI_BASE_URL says otherwise.
const DefaultBaseURL = "https://api.openai.com/v1"

// Config builds a Planner. Zero values take the documented defaults
// (WithDefaults); ConfigFromEnv fills the endpoint from the environment.
type Config struct {
	// BaseURL is the API root including "/v1" (OPENAI_BASE_URL). Default
	// DefaultBaseURL. A classic Azure OpenAI resource URL
	// (https://NAME.openai.azure.com, no "/v1") uses Azure's deployment paths,
	// with Model as the deployment and APIVersion as api-version.
	BaseURL string
	// APIKey is sent as a bearer token (OPENAI_API_KEY). May be empty for local
	// servers. It never appears in logs, errors, the exchange or the ledger.
	APIKey string
	// Model is the model name (OPENAI_MODEL). Required.
	Model string
	// APIVersion is Azure's api-version (OPENAI_API_VERSION), default
	// "2024-10-21"; ignored by other endpoints.
	APIVersion string

	// Temperature, when set, is sent with every request; nil leaves the
	// server's default.
	Temperature *float32
	// MaxTokens bounds each reply (max_tokens, or max_completion_tokens for
	// OpenAI's reasoning models). Default 4096.
	MaxTokens int
	// TokenBudget bounds the total tokens (prompt + completion, as reported by
	// the server) of one planning; past it planning stops with a
	// *PlanningError. Default 500000.
	TokenBudget int
	// Timeout bounds each HTTP request to the model. Default 2m.
	Timeout time.Duration
	// MaxRounds bounds the requests (model turns) of one planning, repairs
	// included. Default 16.
	MaxRounds int
	// MaxRepairs bounds the replies with problems (rejected calls, an invalid
	// or empty plan) the model may fix. Default 3. Negative: no repair.
	MaxRepairs int
	// MaxRetries bounds the retries of one request after a retryable failure
	// (429, 408, 5xx, timeout, connection failure, unreadable body). Default 4.
	MaxRetries int
	// RetryBase is the first backoff (full jitter, doubling), default 500ms;
	// RetryMax caps one backoff, and a Retry-After longer than it fails the
	// request instead of waiting, default 1m.
	RetryBase, RetryMax time.Duration
	// Mode is ModeTools (default) or ModeJSONSchema.
	Mode Mode
	// Strict is StrictAuto (default: tool definitions and the json_schema
	// format are sent with "strict": true where the schema allows, and
	// without it from the first HTTP 400 that refuses it on) or StrictOff
	// (never sent: DeepSeek and gateways that refuse it). DOCKET_STRICT.
	Strict Switch
	// Stream is StreamAuto (default: stream replies when the planning has a
	// progress function, WithProgress), StreamOn or StreamOff. A server that
	// refuses a streamed request (HTTP 400) or answers it with one JSON
	// reply is asked without streaming; with "auto" or "on", a server that
	// only streams (an HTTP 400 asking for stream: true, or a stream
	// answered to a request without it) is asked with streaming from then
	// on. DOCKET_STREAM.
	Stream Switch
	// ToolChoice, when set, is sent as tool_choice (ModeTools): ToolChoiceAuto,
	// or ToolChoiceRequired for servers whose models answer in prose unless
	// forced (sent for the first turn only, "auto" afterwards, so that the
	// model can finish). Default: not sent. DOCKET_TOOL_CHOICE.
	ToolChoice string
	// ParallelToolCalls, when "true" or "false", is sent as
	// parallel_tool_calls (ModeTools). Default "": not sent.
	// DOCKET_PARALLEL_TOOL_CALLS.
	ParallelToolCalls string
	// Order is OrderTurns (default) or OrderReferences (ModeTools only;
	// ModeJSONSchema plans carry their own depends_on). DOCKET_ORDER.
	Order Order
	// Tools is the registry the plan is made for. Required.
	Tools *tools.Registry
	// HTTPClient sends the requests (evals record and replay exchanges with a
	// custom RoundTripper). Default: a client with no overall timeout (Timeout
	// applies per request).
	HTTPClient *http.Client
	// Logger receives debug and warning records; component=planner is added.
	// Default slog.Default().
	Logger *slog.Logger
	// SystemPrompt replaces the built-in system prompt of the mode.
	SystemPrompt string
	// MaxToolResultBytes bounds a read_only tool result fed back to the model;
	// longer results are cut and marked. Default 64 KiB.
	MaxToolResultBytes int
	// Sleep waits d or until ctx ends (returning ctx.Err()); backoffs go
	// through it. Default: a real timer. Tests record the waits instead.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now stamps Plan.CreatedAt. Default time.Now.
	Now func() time.Time
	// TracerProvider traces every model call as a client span named "chat
	// MODEL" with the OpenTelemetry GenAI semantic conventions
	// (gen_ai.request.model, gen_ai.response.model, gen_ai.usage.input_tokens,
	// gen_ai.usage.output_tokens, gen_ai.response.finish_reasons), a child of
	// the span in the planning's context. Nil: no spans.
	TracerProvider trace.TracerProvider
}

// ConfigFromEnv returns a Config whose endpoint comes from OPENAI_BASE_URL,
// OPENAI_API_KEY, OPENAI_MODEL and OPENAI_API_VERSION, read with getenv.
// Callers then set Tools and whatever flags override.
func ConfigFromEnv(getenv func(string) string) Config {
	return Config{
		BaseURL:    strings.TrimSpace(getenv("OPENAI_BASE_URL")),
		APIKey:     strings.TrimSpace(getenv("OPENAI_API_KEY")),
		Model:      strings.TrimSpace(getenv("OPENAI_MODEL")),
		APIVersion: strings.TrimSpace(getenv("OPENAI_API_VERSION")),

		Strict:            Switch(strings.ToLower(strings.TrimSpace(getenv("DOCKET_STRICT")))),
		Stream:            Switch(strings.ToLower(strings.TrimSpace(getenv("DOCKET_STREAM")))),
		ToolChoice:        strings.ToLower(strings.TrimSpace(getenv("DOCKET_TOOL_CHOICE"))),
		ParallelToolCalls: strings.ToLower(strings.TrimSpace(getenv("DOCKET_PARALLEL_TOOL_CALLS"))),
		Order:             Order(strings.ToLower(strings.TrimSpace(getenv("DOCKET_ORDER")))),
	}
}

// WithDefaults returns cfg with every zero field set to its default.
func (cfg Config) WithDefaults() Config {
	cfg.BaseURL = strings.TrimRight(cmp.Or(cfg.BaseURL, DefaultBaseURL), "/")
	cfg.APIVersion = cmp.Or(cfg.APIVersion, "2024-10-21")
	cfg.MaxTokens = cmp.Or(cfg.MaxTokens, 4096)
	cfg.TokenBudget = cmp.Or(cfg.TokenBudget, 500000)
	cfg.Timeout = cmp.Or(cfg.Timeout, 2*time.Minute)
	cfg.MaxRounds = cmp.Or(cfg.MaxRounds, 16)
	cfg.MaxRepairs = cmp.Or(cfg.MaxRepairs, 3)
	cfg.MaxRetries = cmp.Or(cfg.MaxRetries, 4)
	cfg.RetryBase = cmp.Or(cfg.RetryBase, 500*time.Millisecond)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, time.Minute)
	cfg.Mode = cmp.Or(cfg.Mode, ModeTools)
	cfg.Order = cmp.Or(cfg.Order, OrderTurns)
	cfg.Strict = cmp.Or(cfg.Strict, StrictAuto)
	cfg.Stream = cmp.Or(cfg.Stream, StreamAuto)
	cfg.MaxToolResultBytes = cmp.Or(cfg.MaxToolResultBytes, 64<<10)
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg
}

// ErrConfig is wrapped by every error New returns for a configuration that
// cannot work (no model, a malformed base URL, no registry, ...).
var ErrConfig = errors.New("planner: bad configuration")

func (cfg Config) validate() error {
	var problems []string
	if cfg.Tools == nil {
		problems = append(problems, "Tools (the registry) is required")
	}
	if strings.TrimSpace(cfg.Model) == "" {
		problems = append(problems, "a model name is required (OPENAI_MODEL or --model)")
	}
	if u, err := url.Parse(cfg.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		problems = append(problems, fmt.Sprintf("base URL %q is not an http(s) URL (OPENAI_BASE_URL or --base-url, including /v1)", redactURL(cfg.BaseURL)))
	}
	if cfg.Temperature != nil && (*cfg.Temperature < 0 || *cfg.Temperature > 2) {
		problems = append(problems, fmt.Sprintf("temperature %v is outside 0..2", *cfg.Temperature))
	}
	for _, c := range []struct {
		name string
		v    int64
	}{{"MaxTokens", int64(cfg.MaxTokens)}, {"TokenBudget", int64(cfg.TokenBudget)}, {"MaxRounds", int64(cfg.MaxRounds)},
		{"MaxRetries", int64(cfg.MaxRetries)}, {"Timeout", int64(cfg.Timeout)}, {"RetryBase", int64(cfg.RetryBase)},
		{"RetryMax", int64(cfg.RetryMax)}, {"MaxToolResultBytes", int64(cfg.MaxToolResultBytes)}} {
		if c.v < 0 {
			problems = append(problems, c.name+" must not be negative")
		}
	}
	if cfg.Mode != ModeTools && cfg.Mode != ModeJSONSchema {
		problems = append(problems, fmt.Sprintf("mode %q is neither %q nor %q", cfg.Mode, ModeTools, ModeJSONSchema))
	}
	if cfg.Strict != StrictAuto && cfg.Strict != StrictOff {
		problems = append(problems, fmt.Sprintf("strict %q is neither auto nor off", cfg.Strict))
	}
	if cfg.Stream != StreamAuto && cfg.Stream != StreamOn && cfg.Stream != StreamOff {
		problems = append(problems, fmt.Sprintf("stream %q is not auto, on or off", cfg.Stream))
	}
	if cfg.ToolChoice != "" && cfg.ToolChoice != ToolChoiceAuto && cfg.ToolChoice != ToolChoiceRequired {
		problems = append(problems, fmt.Sprintf("tool choice %q is neither auto nor required", cfg.ToolChoice))
	}
	if cfg.ParallelToolCalls != "" && cfg.ParallelToolCalls != "true" && cfg.ParallelToolCalls != "false" {
		problems = append(problems, fmt.Sprintf("parallel tool calls %q is neither true nor false", cfg.ParallelToolCalls))
	}
	if cfg.Order != OrderTurns && cfg.Order != OrderReferences {
		problems = append(problems, fmt.Sprintf("order %q is neither %q nor %q", cfg.Order, OrderTurns, OrderReferences))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(problems, "; "))
	}
	return nil
}

// LogValue shows the configuration without its API key.
func (cfg Config) LogValue() slog.Value {
	key := "unset"
	if cfg.APIKey != "" {
		key = "set"
	}
	temp := "default"
	if cfg.Temperature != nil {
		temp = strconv.FormatFloat(float64(*cfg.Temperature), 'g', -1, 32)
	}
	return slog.GroupValue(
		slog.String("base_url", redactURL(cfg.BaseURL)),
		slog.String("model", cfg.Model),
		slog.String("api_key", key),
		slog.String("mode", string(cfg.Mode)),
		slog.String("temperature", temp),
		slog.Int("max_tokens", cfg.MaxTokens),
		slog.Duration("timeout", cfg.Timeout),
	)
}

// redactURL drops user info and the query (where some gateways carry keys).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable URL)"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "REDACTED"
	}
	return u.String()
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
