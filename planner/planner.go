package planner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/policy"
)

// ErrBadRequest is wrapped by errors about the Request itself (nothing to
// plan from).
var ErrBadRequest = errors.New("planner: bad request")

// Planner turns goals and conversations into plans. Safe for concurrent use.
type Planner struct {
	cfg         Config
	client      *openai.Client
	log         *slog.Logger
	redact      func(string) string
	redactBytes func([]byte) []byte
	names       nameMap
	specs       map[string]tools.Spec // by registry name
	shapes      map[string]*shape     // by registry name: nulls to drop
	fields      map[string][]string   // by registry name: output fields for placeholders
	defs        []openai.Tool         // ModeTools
	format      *openai.ChatCompletionResponseFormat
	system      string
	params      json.RawMessage // the request without messages, for the exchange
	promptHash  string
	said        sync.Map    // warning kinds already logged
	noStrict    atomic.Bool // "strict" is left out (StrictOff, or the server refused it)
	noStream    atomic.Bool // the server refused streaming
	mustStream  atomic.Bool // the server only streams
	noStreamOpt atomic.Bool // the server refused stream_options
}

// Request is what to plan: a goal, a conversation, or both (the goal is then
// appended to the conversation as the user's message).
type Request struct {
	Goal string `json:"goal,omitempty"`
	// Messages is the conversation so far (user, assistant and tool
	// messages; a leading system message is appended to the planner's own).
	// Result.Messages continues it. Its JSON is POST /v1/runs' "messages".
	Messages []Message `json:"messages,omitempty"`
}

// Result is a valid plan and how it was made.
type Result struct {
	// Plan passed plan.Validate against the registry. Its Meta holds the
	// provenance and its Transcript the exchange; Goal is the request's goal
	// (or the last user message).
	Plan    *plan.Plan
	Usage   Usage
	Rounds  int // model turns
	Repairs int // replies with problems the model fixed
	// Reply is the model's closing text (a summary, or an answer when there
	// is nothing to do).
	Reply string
	// Messages is the conversation after planning, without the planner's
	// system prompt: append the execution results (ResultsMessage) and the
	// next user message to continue a chat.
	Messages []Message
	// Exchange is the whole model exchange, redacted (see the package doc);
	// the same bytes as Plan.Transcript.
	Exchange json.RawMessage
	// ModelTime is the time spent in model requests (go-openai encoding the
	// request, the HTTP exchange, decoding the reply), retries included but
	// not the waits between them: the rest of the planning's duration is the
	// planner's own.
	ModelTime time.Duration
	// FromLedger is set by Recorded: the plan was already recorded and the
	// model was not called.
	FromLedger bool
	// Warnings are the server quirks this planning met and worked around
	// (tool calls written as text, a refused "strict", ...), one line each.
	Warnings []string
}

// New checks cfg and prepares the tool definitions.
func New(cfg Config) (*Planner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Planner{
		cfg:         cfg,
		log:         cfg.Logger.With("component", "planner"),
		redact:      redactor(cfg.APIKey),
		redactBytes: bytesRedactor(cfg.APIKey),
		specs:       map[string]tools.Spec{},
		shapes:      map[string]*shape{},
		fields:      map[string][]string{},
	}
	p.client = openai.NewClientWithConfig(p.clientConfig())
	p.noStrict.Store(cfg.Strict == StrictOff)
	p.noStream.Store(cfg.Stream == StreamOff)

	names := cfg.Tools.Names()
	p.names = mapNames(names)
	specs := make([]tools.Spec, 0, len(names))
	strictAll := true
	var branches []any
	for _, n := range names {
		s, _ := cfg.Tools.Spec(n)
		specs = append(specs, s)
		p.specs[n] = s
		schema, sh, strict, err := strictSchema(s.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("%w: tool %s: %v", ErrConfig, n, err)
		}
		if !strict {
			strictAll = false
			p.log.Debug("tool schema sent without strict mode", "tool", n)
		}
		p.shapes[n] = sh
		p.fields[n] = outputFields(s.OutputSchema)
		p.defs = append(p.defs, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: p.names.toWire[n], Description: toolDescription(s, cfg.Tools.Policy(), cfg.Tools.Budgets()), Strict: strict, Parameters: schema,
		}})
		branches = append(branches, actionBranch(p.names.toWire[n], schema))
	}
	switch cfg.Mode {
	case ModeTools:
		p.system = orDefault(cfg.SystemPrompt, toolsPrompt(cfg.Order))
	case ModeJSONSchema:
		p.system = orDefault(cfg.SystemPrompt, jsonPrompt+jsonToolList(specs, p.names, cfg.Tools.Policy(), cfg.Tools.Budgets()))
		p.format = planFormat(branches, strictAll)
	}
	req := p.request(nil)
	params, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding the request: %v", ErrConfig, err)
	}
	p.params = params
	p.promptHash = hashOf(p.system, params)
	p.log.Debug("planner ready", "config", cfg, "tools", len(names), "prompt_hash", p.promptHash)
	return p, nil
}

func orDefault(a, b string) string {
	if strings.TrimSpace(a) != "" {
		return a
	}
	return b
}

func hashOf(parts ...any) string {
	h := sha256.New()
	for _, part := range parts {
		var b []byte
		switch v := part.(type) {
		case string:
			b = []byte(v)
		case json.RawMessage:
			b = v
			if c, err := plan.Canonical(v); err == nil {
				b = c
			}
		}
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// clientConfig builds go-openai's configuration: OpenAI-compatible by
// default, Azure's deployment API for a classic Azure resource URL.
func (p *Planner) clientConfig() openai.ClientConfig {
	cfg := p.cfg
	var cc openai.ClientConfig
	u, _ := url.Parse(cfg.BaseURL)
	azure := u != nil && (strings.HasSuffix(u.Hostname(), ".openai.azure.com") || strings.HasSuffix(u.Hostname(), ".cognitiveservices.azure.com")) &&
		!strings.Contains(u.Path, "/v1")
	if azure {
		cc = openai.DefaultAzureConfig(cfg.APIKey, cfg.BaseURL)
		cc.APIVersion = cfg.APIVersion
	} else {
		cc = openai.DefaultConfig(cfg.APIKey)
		cc.BaseURL = cfg.BaseURL
	}
	cc.HTTPClient = wrapClient(cfg.HTTPClient)
	return cc
}

// reasoningModel: OpenAI's reasoning models refuse max_tokens.
func reasoningModel(m string) bool {
	for _, pre := range []string{"o1", "o3", "o4", "gpt-5"} {
		if strings.HasPrefix(m, pre) {
			return true
		}
	}
	return false
}

// request builds one chat-completions request.
func (p *Planner) request(msgs []openai.ChatCompletionMessage) openai.ChatCompletionRequest {
	r := openai.ChatCompletionRequest{Model: p.cfg.Model, Messages: msgs}
	if reasoningModel(p.cfg.Model) {
		r.MaxCompletionTokens = p.cfg.MaxTokens
	} else {
		// Deprecated upstream for OpenAI's reasoning models only: the
		// OpenAI-compatible servers docket talks to take max_tokens.
		//lint:ignore SA1019 max_tokens is what non-reasoning models and compatible servers accept
		r.MaxTokens = p.cfg.MaxTokens
	}
	if t := p.cfg.Temperature; t != nil {
		// go-openai omits a zero temperature; the smallest positive float32
		// asks for the same greedy decoding and is sent.
		r.Temperature = max(*t, math.SmallestNonzeroFloat32)
	}
	switch p.cfg.Mode {
	case ModeTools:
		r.Tools = p.defs
		if p.noStrict.Load() {
			r.Tools = withoutStrict(p.defs)
		}
		if p.cfg.ToolChoice != "" {
			r.ToolChoice = p.cfg.ToolChoice
		}
		switch p.cfg.ParallelToolCalls {
		case "true":
			r.ParallelToolCalls = true
		case "false":
			r.ParallelToolCalls = false
		}
	case ModeJSONSchema:
		r.ResponseFormat = p.format
		if p.noStrict.Load() && p.format != nil && p.format.JSONSchema != nil {
			f, js := *p.format, *p.format.JSONSchema
			js.Strict = false
			f.JSONSchema = &js
			r.ResponseFormat = &f
		}
	}
	return r
}

// withoutStrict is defs with "strict" left out.
func withoutStrict(defs []openai.Tool) []openai.Tool {
	out := make([]openai.Tool, len(defs))
	for i, d := range defs {
		out[i] = d
		if d.Function != nil {
			f := *d.Function
			f.Strict = false
			out[i].Function = &f
		}
	}
	return out
}

// session is the state of one planning.
type session struct {
	p         *Planner
	msgs      []openai.ChatCompletionMessage // index 0: the system prompt
	actions   []plan.Action
	usage     openai.Usage
	rounds    int
	repairs   int
	problems  []Problem // of the last reply that had any
	ex        exchange
	callIDs   map[string]bool
	reply     string
	idBase    int                            // action ids continue after those of earlier turns of a chat
	lastTurn  []string                       // ids queued by the most recent message that queued any (OrderTurns)
	modelTime time.Duration                  // inside go-openai's CreateChatCompletion
	system    []openai.ChatCompletionMessage // the caller's own leading system message, merged into ours
	progress  func(Progress)                 // WithProgress, or nil
}

// Plan asks the model for a plan and returns it validated. It records
// nothing; read_only tools may run (they have no effect by definition).
//
// Errors: ErrBadRequest (no goal and no user message), *ModelError (the
// endpoint failed for good), *PlanningError (the model did not produce a valid
// plan: truncated, filtered, refused, out of rounds or tokens, or still
// invalid after Config.MaxRepairs repairs), or the context's error.
//
// Wire-level handling: a tool call without an id, or with an id already used
// in the conversation, gets a fresh id in the conversation sent back; a
// message with both content and tool calls keeps the content as the actions'
// "why"; a reply with neither content nor tool calls is answered with a
// reminder and counts as a repair; a 200 answer carrying an error object is a
// *ModelError; arguments that are not one JSON object, unknown tool names and
// invalid arguments are answered with the problem as the tool result. Tool
// calls written as text in the content are read as calls, or fail the
// planning with ReasonTextCalls (the package doc's "Servers").
func (p *Planner) Plan(ctx context.Context, req Request) (*Result, error) {
	s, err := p.newSession(req)
	if err != nil {
		return nil, err
	}
	s.progress = progressOf(ctx)
	if err := s.loop(ctx); err != nil {
		return nil, err
	}
	return s.result(req)
}

func (p *Planner) newSession(req Request) (*session, error) {
	sys := p.system
	msgs := make([]openai.ChatCompletionMessage, 0, len(req.Messages)+4)
	msgs = append(msgs, openai.ChatCompletionMessage{})
	var userSystem []openai.ChatCompletionMessage
	for i, m := range toOpenAI(req.Messages) {
		if i == 0 && m.Role == openai.ChatMessageRoleSystem {
			sys += "\n\n" + m.Content
			userSystem = []openai.ChatCompletionMessage{m}
			continue
		}
		msgs = append(msgs, m)
	}
	msgs[0] = openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: sys}
	if g := strings.TrimSpace(req.Goal); g != "" {
		msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: req.Goal})
	}
	hasUser := false
	ids := map[string]bool{}
	for _, m := range msgs {
		hasUser = hasUser || m.Role == openai.ChatMessageRoleUser
		for _, c := range m.ToolCalls {
			ids[c.ID] = true
		}
	}
	if !hasUser {
		return nil, fmt.Errorf("%w: nothing to plan: give a goal or a conversation with a user message", ErrBadRequest)
	}
	return &session{
		p:       p,
		msgs:    msgs,
		callIDs: ids,
		idBase:  lastActionNumber(msgs),
		system:  userSystem,
		ex:      exchange{Model: p.cfg.Model, Mode: p.cfg.Mode, PromptHash: p.promptHash, Params: p.params},
	}, nil
}

// lastActionNumber finds the highest action number N of the placeholders
// ("action_id": "aN") in the conversation, so that a new turn's ids do not
// reuse those of an earlier turn's plan.
func lastActionNumber(msgs []openai.ChatCompletionMessage) int {
	last := 0
	for _, m := range msgs {
		if m.Role != openai.ChatMessageRoleTool || !strings.Contains(m.Content, `"queued":true`) {
			continue
		}
		var ph struct {
			Queued   bool   `json:"queued"`
			ActionID string `json:"action_id"`
		}
		if json.Unmarshal([]byte(m.Content), &ph) != nil || !ph.Queued || !strings.HasPrefix(ph.ActionID, "a") {
			continue
		}
		if n, err := strconv.Atoi(ph.ActionID[1:]); err == nil && n > last && n < 1<<30 {
			last = n
		}
	}
	return last
}

func (s *session) fail(reason Reason, format string, a ...any) *PlanningError {
	return &PlanningError{Reason: reason, Msg: s.p.redact(fmt.Sprintf(format, a...)), Problems: s.problems, Rounds: s.rounds, Repairs: s.repairs}
}

// loop runs model turns until the model finishes a plan.
func (s *session) loop(ctx context.Context) error {
	cfg := s.p.cfg
	for {
		if s.rounds >= cfg.MaxRounds {
			return s.fail(ReasonRounds, "no finished plan after %d model turns (MaxRounds)", s.rounds)
		}
		s.rounds++
		s.emit(Progress{Kind: ProgressRound})
		resp, err := s.send(ctx)
		if err != nil {
			return err
		}
		done, err := s.absorb(ctx, resp)
		if err != nil || done {
			return err
		}
	}
}

// absorb takes one reply of the model: it ends planning (done, or an error),
// or answers the reply in the conversation for the next turn.
func (s *session) absorb(ctx context.Context, resp openai.ChatCompletionResponse) (done bool, err error) {
	cfg := s.p.cfg
	maxRepairs := max(cfg.MaxRepairs, 0)
	s.usage.PromptTokens += resp.Usage.PromptTokens
	s.usage.CompletionTokens += resp.Usage.CompletionTokens
	s.usage.TotalTokens += resp.Usage.TotalTokens
	if s.usage.TotalTokens > cfg.TokenBudget {
		return false, s.fail(ReasonTokens, "used %d tokens, more than the budget of %d (TokenBudget)", s.usage.TotalTokens, cfg.TokenBudget)
	}
	var msg openai.ChatCompletionMessage
	var finish openai.FinishReason
	if len(resp.Choices) > 0 {
		msg, finish = resp.Choices[0].Message, resp.Choices[0].FinishReason
	}
	switch finish {
	case openai.FinishReasonLength:
		return false, s.fail(ReasonTruncated, "the model's reply was cut off at its token limit (max tokens %d) in round %d; a truncated plan is never used: raise the limit (--max-tokens) or narrow the goal", cfg.MaxTokens, s.rounds)
	case openai.FinishReasonContentFilter:
		return false, s.fail(ReasonContentFilter, "the provider's content filter stopped the model's reply in round %d", s.rounds)
	}
	if r := strings.TrimSpace(msg.Refusal); r != "" {
		return false, s.fail(ReasonRefused, "the model refused: %s", clip(r, 500))
	}
	if msg.FunctionCall != nil && len(msg.ToolCalls) == 0 { // the legacy single-call form
		msg.ToolCalls = []openai.ToolCall{{Type: openai.ToolTypeFunction, Function: *msg.FunctionCall}}
		msg.FunctionCall = nil
	}
	if cfg.Mode == ModeTools && len(msg.ToolCalls) == 0 {
		calls, rest, form, err := contentToolCalls(msg.Content)
		switch {
		case err != nil:
			return false, s.fail(ReasonTextCalls, "the server returned tool calls as %s text in the reply's content instead of as tool_calls, and %v; %s; the model answered: %s", form, err, parserHint(form), clip(strings.TrimSpace(msg.Content), 500))
		case form != "":
			s.warn(warnTextCalls+":"+string(form), fmt.Sprintf("the server returned tool calls as %s text in the content instead of as tool_calls; docket read them as tool calls: %s", formText(form), parserHint(form)))
			msg.ToolCalls, msg.Content = calls, rest
		}
	}
	var problems []Problem
	switch {
	case cfg.Mode == ModeTools && len(msg.ToolCalls) > 0:
		problems = s.handleCalls(ctx, msg)
	case strings.TrimSpace(msg.Content) == "" && (cfg.Mode == ModeJSONSchema || len(s.actions) == 0):
		s.problems = []Problem{{Round: s.rounds, Msg: "the model's reply was empty"}}
		if s.repairs >= maxRepairs {
			return false, s.fail(ReasonEmpty, "the model replied with nothing usable")
		}
		s.msgs = append(s.msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser,
			Content: "[docket] Your reply was empty. Make the tool calls the goal needs, or reply with a short text if nothing needs doing."})
		s.repairs++
		return false, nil
	case cfg.Mode == ModeJSONSchema:
		problems = s.structured(msg)
		if len(problems) == 0 {
			return true, nil
		}
	default:
		if cfg.Mode == ModeTools && s.p.names.callSyntax(msg.Content) {
			// Never an empty plan from calls docket could not read; after
			// queued actions the text may be a summary naming them: said.
			if len(s.actions) == 0 {
				return false, s.fail(ReasonTextCalls, "the model's reply has no tool calls, and %v; %s; the model answered: %s", errCallSyntax, parserHint(""), clip(strings.TrimSpace(msg.Content), 500))
			}
			s.warn(warnTextCalls+":unread", fmt.Sprintf("the model's closing reply %v, after %d queued actions; they are the plan, check it is complete: %s", errCallSyntax, len(s.actions), clip(strings.TrimSpace(msg.Content), 300)))
		}
		s.msgs = append(s.msgs, assistantText(msg))
		s.reply = strings.TrimSpace(msg.Content)
		return true, nil
	}
	s.problems = problems // the problems still standing: those of the last reply
	if len(problems) > 0 {
		if s.repairs >= maxRepairs {
			return false, s.fail(ReasonInvalid, "the model's calls were still invalid after %d repairs", s.repairs)
		}
		s.repairs++
	}
	return false, nil
}

func assistantText(m openai.ChatCompletionMessage) openai.ChatCompletionMessage {
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: m.Content}
}

// handleCalls answers every tool call of one assistant message: read_only
// calls run now, the others become queued actions; problems are answered too.
func (s *session) handleCalls(ctx context.Context, msg openai.ChatCompletionMessage) []Problem {
	p := s.p
	round := s.rounds
	calls := make([]openai.ToolCall, len(msg.ToolCalls))
	copy(calls, msg.ToolCalls)
	for i := range calls {
		c := &calls[i]
		if c.ID == "" || s.callIDs[c.ID] {
			old := c.ID
			c.ID = s.freshID(round, i)
			p.log.Debug("tool call id replaced", "old", old, "new", c.ID, "round", round)
		}
		s.callIDs[c.ID] = true
		c.Type = openai.ToolTypeFunction
		c.Index = nil
	}
	s.msgs = append(s.msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: msg.Content, ToolCalls: calls})
	why := clip(strings.TrimSpace(msg.Content), 500)

	results := make([]string, len(calls))
	var problems []Problem
	reject := func(i int, pr Problem) {
		pr.Round, pr.Call, pr.Tool = round, calls[i].ID, calls[i].Function.Name
		problems = append(problems, pr)
		b, _ := marshalNoEscape(map[string]string{"error": "rejected, not queued: " + pr.Msg})
		results[i] = string(b)
	}
	type job struct {
		i    int
		spec tools.Spec
		args json.RawMessage
	}
	var reads []job
	queuedBefore := len(s.actions)
	for i, c := range calls {
		name, ok := p.names.registryName(c.Function.Name)
		if !ok {
			reject(i, Problem{Msg: fmt.Sprintf("unknown tool %q; the tools are: %s", c.Function.Name, strings.Join(p.wireNames(), ", "))})
			continue
		}
		if c.Function.Name != name && c.Function.Name != p.names.toWire[name] {
			s.warn(warnNamePrefix, fmt.Sprintf("the model named a tool %q (a namespace such as \"functions.\" before the name); docket took it for %s", c.Function.Name, p.names.toWire[name]))
			calls[i].Function.Name = p.names.toWire[name] // the conversation names the tool as offered
		}
		if text, ok := unwrapArgs(c.Function.Arguments); ok {
			s.warn(warnArgsTwice, "the server sent tool call arguments encoded twice (a JSON string holding the JSON text); docket decoded them once more")
			c.Function.Arguments = text
			calls[i].Function.Arguments = text
		}
		spec := p.specs[name]
		args, refs, err := normalizeArgs(c.Function.Arguments, p.shapes[name])
		if err != nil {
			reject(i, Problem{Field: "args", Msg: err.Error()})
			continue
		}
		if spec.Class == tools.ReadOnly {
			if len(refs) > 0 {
				reject(i, Problem{Field: "args", Msg: fmt.Sprintf("%s is read-only and runs now, before any queued action has run, so it cannot use %s; use values you know", c.Function.Name, refs[0].Text)})
				continue
			}
			if err := p.cfg.Tools.ValidateResolved(name, args); err != nil {
				reject(i, Problem{Field: "args", Msg: argsMessage(err)})
				continue
			}
			reads = append(reads, job{i, spec, args})
			continue
		}
		if err := p.cfg.Tools.ValidateArgs(name, args); err != nil {
			reject(i, Problem{Field: "args", Msg: argsMessage(err)})
			continue
		}
		deps, msgText := s.dependencies(refs, queuedBefore)
		if msgText != "" {
			reject(i, Problem{Field: "args", Msg: msgText})
			continue
		}
		if msg := p.denied(spec, args, refs); msg != "" {
			reject(i, Problem{Field: "policy", Msg: msg})
			continue
		}
		if p.cfg.Order == OrderTurns {
			// A call made after the model saw earlier queued actions' placeholders
			// runs after them (the package doc's "Order").
			for _, d := range s.lastTurn {
				if !contains(deps, d) {
					deps = append(deps, d)
				}
			}
		}
		id := fmt.Sprintf("a%d", s.idBase+len(s.actions)+1)
		s.actions = append(s.actions, plan.Action{ID: id, Tool: name, Args: args, DependsOn: deps, Why: why})
		results[i] = placeholder(id, p.fields[name])
		a := s.actions[len(s.actions)-1]
		s.emit(Progress{Kind: ProgressAction, Tool: name, Action: &a})
	}
	if len(reads) > 0 {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for _, j := range reads {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				results[j.i] = p.runReadOnly(ctx, j.spec, j.args)
			}()
		}
		wg.Wait()
		for _, j := range reads {
			s.emit(Progress{Kind: ProgressRead, Tool: j.spec.Name, Args: j.args})
		}
	}
	for _, pr := range problems {
		s.emit(Progress{Kind: ProgressRejected, Tool: pr.Tool, Msg: pr.Msg})
	}
	if len(s.actions) > queuedBefore {
		s.lastTurn = s.lastTurn[:0:0]
		for _, a := range s.actions[queuedBefore:] {
			s.lastTurn = append(s.lastTurn, a.ID)
		}
	}
	for i, c := range calls {
		s.msgs = append(s.msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: c.ID, Content: results[i]})
	}
	return problems
}

func (s *session) freshID(round, i int) string {
	for n := 0; ; n++ {
		id := fmt.Sprintf("call_docket_%d_%d", round, i)
		if n > 0 {
			id += fmt.Sprintf("_%d", n)
		}
		if !s.callIDs[id] {
			return id
		}
	}
}

// dependencies turns references into depends_on: each must name an action
// queued by an earlier message.
func (s *session) dependencies(refs []plan.Ref, queuedBefore int) ([]string, string) {
	var deps []string
	for _, r := range refs {
		idx := -1
		for k, a := range s.actions {
			if a.ID == r.Action {
				idx = k
				break
			}
		}
		switch {
		case idx < 0:
			return nil, fmt.Sprintf("%s names no queued action (queued so far: %s); only queued actions have outputs to reference, read-only results are values you can use directly", r.Text, s.queuedList())
		case idx >= queuedBefore:
			return nil, fmt.Sprintf("%s names an action queued in this same message; calls in one message are independent: make this call in a later message", r.Text)
		}
		if !contains(deps, r.Action) {
			deps = append(deps, r.Action)
		}
	}
	return deps, ""
}

func (s *session) queuedList() string {
	if len(s.actions) == 0 {
		return "none"
	}
	ids := make([]string, len(s.actions))
	for i, a := range s.actions {
		ids[i] = a.ID
	}
	return strings.Join(ids, ", ")
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func (p *Planner) wireNames() []string {
	out := make([]string, 0, len(p.names.fromWire))
	for _, n := range p.cfg.Tools.Names() {
		out = append(out, p.names.toWire[n])
	}
	return out
}

// argsMessage renders a validation error for the model: every path and problem.
func argsMessage(err error) string {
	var ae *tools.ArgsError
	if errors.As(err, &ae) && len(ae.Problems) > 0 {
		parts := make([]string, len(ae.Problems))
		for i, pr := range ae.Problems {
			path := pr.Path
			if path == "" {
				path = "/"
			}
			parts[i] = path + ": " + pr.Msg
		}
		return "invalid arguments: " + strings.Join(parts, "; ")
	}
	return err.Error()
}

// runReadOnly performs a read_only call while planning. Its result (or error)
// is the tool result the model sees.
func (p *Planner) runReadOnly(ctx context.Context, spec tools.Spec, args json.RawMessage) string {
	t, ok := p.cfg.Tools.Get(spec.Name)
	if !ok {
		return `{"error":"tool not registered"}`
	}
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := t.Call(cctx, tools.Call{Action: "planning", Attempt: 1, Args: args})
	if err != nil {
		p.log.Debug("read-only call failed while planning", "tool", spec.Name, "err", p.redact(err.Error()))
		b, _ := marshalNoEscape(map[string]string{"error": p.redact(clip(err.Error(), 2000))})
		return string(b)
	}
	res := p.redact(string(out))
	if len(res) > p.cfg.MaxToolResultBytes {
		b, _ := marshalNoEscape(map[string]any{"truncated": true, "bytes": len(res), "partial": clip(res, p.cfg.MaxToolResultBytes)})
		return string(b)
	}
	return res
}

// send makes one model call (retrying what is safe to retry) in a span of
// its own (Config.TracerProvider).
func (s *session) send(ctx context.Context) (openai.ChatCompletionResponse, error) {
	if s.p.cfg.TracerProvider == nil {
		return s.sendRetrying(ctx)
	}
	model := s.p.cfg.Model
	ctx, span := s.p.cfg.TracerProvider.Tracer("github.com/docketrun/docket/planner").Start(ctx, "chat "+model,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "chat"),
			attribute.String("gen_ai.provider.name", "openai"),
			attribute.String("gen_ai.request.model", model)))
	resp, err := s.sendRetrying(ctx)
	if resp.Model != "" {
		span.SetAttributes(attribute.String("gen_ai.response.model", resp.Model))
	}
	if resp.ID != "" {
		span.SetAttributes(attribute.String("gen_ai.response.id", resp.ID))
	}
	if len(resp.Choices) > 0 {
		reasons := make([]string, len(resp.Choices))
		for i, c := range resp.Choices {
			reasons[i] = string(c.FinishReason)
		}
		span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", reasons),
			attribute.Int("gen_ai.usage.input_tokens", resp.Usage.PromptTokens),
			attribute.Int("gen_ai.usage.output_tokens", resp.Usage.CompletionTokens))
	}
	if err != nil {
		kind := "error"
		var me *ModelError
		if errors.As(err, &me) && me.Status != 0 {
			kind = strconv.Itoa(me.Status)
		}
		span.SetAttributes(attribute.String("error.type", kind))
		span.SetStatus(codes.Error, err.Error()) // redacted: errors never carry the API key
	}
	span.End()
	return resp, err
}

// sendRetrying makes one model request, retrying what is safe to retry.
func (s *session) sendRetrying(ctx context.Context) (openai.ChatCompletionResponse, error) {
	p := s.p
	cfg := p.cfg
	build := func() openai.ChatCompletionRequest {
		req := p.request(s.msgs)
		if cfg.ToolChoice == ToolChoiceRequired && s.rounds > 1 {
			req.ToolChoice = ToolChoiceAuto // "required" for the first turn only: later turns must be able to finish
		}
		if s.streaming() {
			req.Stream = true
			if !p.noStreamOpt.Load() {
				req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
			}
		}
		return req
	}
	req := build()
	for n := 1; ; n++ {
		at := &attempt{Round: s.rounds, Attempt: n, stream: req.Stream}
		actx, cancel := context.WithTimeout(context.WithValue(ctx, attemptKey{}, at), cfg.Timeout)
		start := time.Now()
		var resp openai.ChatCompletionResponse
		var err error
		if req.Stream {
			resp, err = s.stream(actx, req, at)
		} else {
			resp, err = p.client.CreateChatCompletion(actx, req)
			if err != nil && at.read && at.Status/100 == 2 && isEventStream(at.header, at.body) {
				// streamed although not asked: read the stream
				resp, err = s.readEvents(at.body, at)
				if err == nil && cfg.Stream == StreamOff {
					s.warn(warnSSEUnasked, "the server answered with a stream (server-sent events) although the request did not ask for one; docket read the stream")
				} else if err == nil {
					s.warn(warnSSEUnasked, "the server answered with a stream (server-sent events) although the request did not ask for one; docket read the stream and asks for streamed replies from now on")
					p.mustStream.Store(true)
				}
			}
		}
		timedOut := err != nil && isTimeout(err, actx, ctx)
		cancel()
		at.dur = time.Since(start)
		at.DurationMS = at.dur.Milliseconds()
		at.finish(p.redactBytes)
		s.ex.Attempts = append(s.ex.Attempts, at)
		s.modelTime += at.dur
		if at.fixedArgs {
			s.warn(warnArgsObject, "the server sent tool call arguments as JSON objects instead of JSON text; docket re-encoded them")
		}
		var me *ModelError
		if errors.As(err, &me) {
			at.Error = me.Msg
			return resp, err
		}
		if errors.Is(err, errBadChunk) {
			at.Error = p.redact(err.Error())
			return resp, &ModelError{Status: at.Status, Attempts: n, Msg: "the streamed reply could not be read (not retried: the server would answer the same): " + at.Error}
		}
		if err == nil {
			if len(resp.Choices) > 0 {
				return resp, nil
			}
			if msg, bad := errorInBody(at.body); bad {
				at.Error = p.redact(msg)
				if !req.Stream && s.streamOnly(400, msg, at) {
					req = build()
					continue
				}
				return resp, &ModelError{Status: at.Status, Attempts: n, Msg: "the server answered with an error: " + at.Error + streamHint(req.Stream, 400, msg)}
			}
			return resp, nil
		}
		if ctx.Err() != nil {
			return resp, fmt.Errorf("planner: waiting for the model: %w", ctx.Err())
		}
		if !at.sent && !timedOut {
			// go-openai refused the request before sending it (its checks of
			// reasoning models' parameters, a URL it cannot build).
			at.Error = p.redact(err.Error())
			return resp, fmt.Errorf("%w: the request was refused before sending: %s", ErrConfig, at.Error)
		}
		status, msg, retry := classify(err, at, timedOut, cfg.Timeout)
		msg = p.redact(msg)
		at.Error = msg
		if strictRefused(status, msg) && !p.noStrict.Load() {
			p.noStrict.Store(true)
			at.Error += ` (sent again without "strict")`
			s.warn(warnStrictRefuse, `the server refused "strict" in the tool definitions or the response format (HTTP 400); docket leaves it out from now on (set --strict=off or DOCKET_STRICT=off to skip the refused request)`)
			req = build()
			continue
		}
		if req.Stream && streamRefused(status, msg) && p.mustStream.Load() && req.StreamOptions != nil && !p.noStreamOpt.Load() {
			// a server that only streams refuses stream_options
			p.noStreamOpt.Store(true)
			at.Error += " (sent again without stream_options)"
			req = build()
			continue
		}
		if req.Stream && streamRefused(status, msg) && !p.noStream.Load() && !p.mustStream.Load() {
			p.noStream.Store(true)
			at.Error += " (sent again without streaming)"
			s.warn(warnStreamRefuse, "the server refused a streamed request (HTTP 400); docket asks without streaming from now on (--stream=off or DOCKET_STREAM=off skips the refused request)")
			req = build()
			continue
		}
		if !req.Stream && s.streamOnly(status, msg, at) {
			req = build()
			continue
		}
		if !retry {
			return resp, &ModelError{Status: status, Attempts: n, Msg: msg + streamHint(req.Stream, status, msg)}
		}
		if n > cfg.MaxRetries {
			return resp, &ModelError{Status: status, Attempts: n, Msg: msg}
		}
		wait := backoff(cfg.RetryBase, cfg.RetryMax, n)
		if ra := at.retryAfter(time.Now()); ra > 0 {
			if ra > cfg.RetryMax {
				return resp, &ModelError{Status: status, Attempts: n, After: ra, Msg: fmt.Sprintf("%s; the server asks to retry after %s, longer than RetryMax %s", msg, ra, cfg.RetryMax)}
			}
			wait = ra
		}
		p.log.Debug("retrying model request", "round", s.rounds, "attempt", n, "status", status, "wait", wait, "err", msg)
		if err := cfg.Sleep(ctx, wait); err != nil {
			return resp, fmt.Errorf("planner: waiting to retry the model: %w", err)
		}
	}
}

// classify says what a failed request was and whether to retry it.
func classify(err error, at *attempt, timedOut bool, timeout time.Duration) (status int, msg string, retry bool) {
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case timedOut:
		return 0, fmt.Sprintf("no answer within %s (Timeout)", timeout), true
	case errors.As(err, &apiErr):
		status, msg = apiErr.HTTPStatusCode, apiErr.Message
		// go-openai reads "code": null (what OpenAI sends when there is no
		// code) as the number 0: say a code only when there is one.
		if c := fmt.Sprint(apiErr.Code); apiErr.Code != nil && c != "0" && c != "" {
			msg = fmt.Sprintf("%s (code %s)", msg, c)
		}
	case errors.As(err, &reqErr):
		status = reqErr.HTTPStatusCode
		msg = fmt.Sprintf("%s: %s", reqErr.HTTPStatus, clip(strings.TrimSpace(string(reqErr.Body)), 300))
	case at.Status >= 200 && at.Status < 300 && at.read && json.Valid(bytes.TrimSpace(at.body)):
		// A whole JSON answer that is not a chat completion go-openai can
		// read: asking again gets the same answer.
		return at.Status, "the reply is JSON but not a chat completion docket can read (not retried: the server would answer the same): " + err.Error() + ": " + clip(string(bytes.TrimSpace(at.body)), 300), false
	case at.Status >= 200 && at.Status < 300:
		return at.Status, "unreadable reply (cut off?): " + err.Error(), true
	default:
		return 0, err.Error(), true // no answer: connection refused, reset, ...
	}
	retry = status == 408 || status == 429 || status >= 500
	return status, msg, retry
}

// backoff is full jitter over an exponential: uniform in [0, min(max, base·2^(n-1))].
func backoff(base, maxWait time.Duration, n int) time.Duration {
	d := base << min(n-1, 20)
	if d <= 0 || d > maxWait {
		d = maxWait
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// result assembles the validated plan and its provenance.
func (s *session) result(req Request) (*Result, error) {
	p := s.p
	pl := &plan.Plan{Goal: goalOf(req, fromOpenAI(s.msgs)), Actions: s.actions}
	if pl.Actions == nil {
		pl.Actions = []plan.Action{}
	}
	// Every action's arguments were validated against its tool when it was
	// queued (ModeTools) or decoded (ModeJSONSchema); what is left to check is
	// the plan as a whole: ids, dependencies, references, cycles.
	if err := pl.Check(); err != nil {
		s.problems = planProblems(err)
		return nil, s.fail(ReasonInvalid, "the finished plan does not validate")
	}
	s.ex.Messages = s.msgs
	s.ex.Usage = usageOf(s.usage)
	ex, err := json.Marshal(&s.ex)
	if err != nil {
		return nil, fmt.Errorf("planner: encoding the exchange: %w", err)
	}
	ex = p.redactBytes(ex)
	sum := sha256.Sum256(ex) // this planning's document id: the exchange it came from
	pl.ID = "plan_" + hex.EncodeToString(sum[:8])
	pl.CreatedAt = p.cfg.Now().UTC()
	pl.Transcript = ex
	pl.Meta = map[string]string{
		"planner":     "docket-planner/1",
		"model":       p.cfg.Model,
		"mode":        string(p.cfg.Mode),
		"prompt_hash": p.promptHash,
		"tools_hash":  p.cfg.Tools.Hash(),
	}
	Provenance{Usage: usageOf(s.usage), Rounds: s.rounds, Repairs: s.repairs}.addTo(pl.Meta)
	if served := s.servedModel(); served != "" && served != p.cfg.Model {
		pl.Meta["served_model"] = served
	}
	return &Result{
		Warnings: slices.Clone(s.ex.Notes),
		Plan:     pl, Usage: usageOf(s.usage), Rounds: s.rounds, Repairs: s.repairs, Reply: s.reply,
		Messages: fromOpenAI(append(slices.Clone(s.system), s.msgs[1:]...)), Exchange: ex, ModelTime: s.modelTime,
	}, nil
}

// servedModel is the model name the last successful answer reported.
func (s *session) servedModel() string {
	for i := len(s.ex.Attempts) - 1; i >= 0; i-- {
		if r := s.ex.Attempts[i].Response; len(r) > 0 {
			var v struct {
				Model string `json:"model"`
			}
			if json.Unmarshal(r, &v) == nil && v.Model != "" {
				return v.Model
			}
		}
	}
	return ""
}

// goalOf is the request's goal, or the last user message.
func goalOf(req Request, msgs []Message) string {
	if g := strings.TrimSpace(req.Goal); g != "" {
		return req.Goal
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == RoleUser && msgs[i].Content != "" {
			return msgs[i].Content
		}
	}
	return ""
}

// planProblems converts plan.Errors (or any error) into Problems.
func planProblems(err error) []Problem {
	var pe plan.Errors
	if errors.As(err, &pe) {
		out := make([]Problem, len(pe))
		for i, pr := range pe {
			out[i] = Problem{Action: pr.Action, Field: pr.Field, Msg: pr.Msg}
		}
		return out
	}
	return []Problem{{Msg: err.Error()}}
}

// denied answers a call the policy denies (tool rules, then global ones),
// with the rule's message, so that the model can plan without it. Only a
// call whose arguments are all known is judged here, and only a deny that
// did not come from a rule failing: the executor decides again, on the
// resolved arguments, before anything runs.
func (p *Planner) denied(spec tools.Spec, args json.RawMessage, refs []plan.Ref) string {
	global := p.cfg.Tools.Policy()
	if len(refs) > 0 || (len(spec.Policy) == 0 && len(global) == 0) {
		return ""
	}
	rules := append(append([]policy.Rule(nil), spec.Policy...), global...)
	d := policy.Eval(rules, policy.Input{Tool: spec.Name, Class: string(spec.Class), Args: args, Now: p.cfg.Now()})
	if !d.Matched || d.Outcome != policy.Deny || d.Err != "" {
		return ""
	}
	msg := d.Message
	if msg == "" {
		msg = "the call is not allowed"
	}
	return fmt.Sprintf("denied by policy (rule %s): %s; nothing was queued: plan without this call or change it", d.Rule, msg)
}
