// Package demomodel is a scripted language model for docket's demo mode: an
// OpenAI-compatible chat-completions endpoint that speaks the real wire format
// (tool definitions in, tool calls out) and plans customer onboardings against
// the demo world's tools (evals/demoworld), so `docket serve` works out of
// the box without a model endpoint.
//
// It understands goals such as "onboard ACME: create the CRM contact, invoice
// 1200 EUR, email the welcome pack". From the goal it picks the steps (price
// lookup, CRM contact, invoice, account settings, welcome email), then makes
// one tool call per reply in that order, reading the planner's placeholders
// ("action_id": "a1") to reference earlier actions' outputs
// ("${a1.output.id}"), and closes with a one-line summary. It keeps no state:
// every reply is a function of the request, so a replayed conversation gets
// the same answers. A goal it cannot plan is refused (the wire's "refusal"
// field, also in the content), saying what it knows (Knows), so the planner
// reports it rather than recording an empty plan.
//
// Imports: the standard library and github.com/sashabaranov/go-openai (for the
// wire types).
package demomodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	openai "github.com/sashabaranov/go-openai"
)

// Model is the model name the endpoint reports and accepts (any name is
// accepted; this is the one docket configures).
const Model = "docket-demo"

// BaseURL is the base URL to configure a client with when it uses Transport:
// requests never leave the process, so the host is a placeholder.
const BaseURL = "http://demo-model.invalid/v1"

// maxBody bounds a request body.
const maxBody = 8 << 20

// Handler serves POST /v1/chat/completions (and /chat/completions).
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", complete)
	mux.HandleFunc("POST /chat/completions", complete)
	return mux
}

// Transport returns a RoundTripper that answers every request with Handler,
// in-process: set it on the HTTP client of an OpenAI client whose base URL is
// BaseURL.
func Transport() http.RoundTripper { return handlerTransport{Handler()} }

type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, r)
	res := rec.Result()
	res.Request = r
	return res, nil
}

func fail(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ}})
}

func complete(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		fail(w, http.StatusBadRequest, "invalid_request_error", "unreadable body: "+err.Error())
		return
	}
	if len(body) > maxBody {
		fail(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request body too large")
		return
	}
	var req openai.ChatCompletionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		fail(w, http.StatusBadRequest, "invalid_request_error", "request is not a chat completion request: "+err.Error())
		return
	}
	if len(req.Tools) == 0 {
		fail(w, http.StatusBadRequest, "invalid_request_error", "the demo model plans with tool calling only: send the tools")
		return
	}
	msg, prompt := Reply(req)
	finish := openai.FinishReasonStop
	if len(msg.ToolCalls) > 0 {
		finish = openai.FinishReasonToolCalls
	}
	completion := len(msg.Content) / 4
	for _, c := range msg.ToolCalls {
		completion += (len(c.Function.Name) + len(c.Function.Arguments)) / 4
	}
	resp := openai.ChatCompletionResponse{
		ID:      fmt.Sprintf("chatcmpl-demo-%d", len(req.Messages)),
		Object:  "chat.completion",
		Created: 1767225600, // fixed: replies are a function of the request
		Model:   Model,
		Choices: []openai.ChatCompletionChoice{{Index: 0, Message: msg, FinishReason: finish}},
		Usage:   openai.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion},
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(resp); err != nil {
		fail(w, http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(buf.Bytes())
}

// goal is what the model understood of the user's request.
type goal struct {
	company  string
	email    string
	plan     string // catalogue plan name
	amount   string // "" = take it from the catalogue
	currency string
	steps    []string // tool names, in call order
}

var (
	reOnboard  = regexp.MustCompile(`(?i)\bonboard(?:ing)?\s+([A-Za-z0-9][A-Za-z0-9&._-]*)`)
	reEmail    = regexp.MustCompile(`[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}`)
	reAmount   = regexp.MustCompile(`(?i)\binvoic\w*\s+(?:(?:for|of)\s+)?(\d{1,9})\s*([A-Za-z]{3})?\b`)
	rePlanName = regexp.MustCompile(`(?i)\b(starter|pro)\b`)
)

// understand reads the goal. ok is false when it is not an onboarding.
func understand(text string) (goal, bool) {
	m := reOnboard.FindStringSubmatch(text)
	if m == nil {
		return goal{}, false
	}
	g := goal{company: strings.TrimRight(m[1], ":,.;"), plan: "pro", currency: "EUR"}
	lower := strings.ToLower(text)
	if e := reEmail.FindString(text); e != "" {
		g.email = e
	} else {
		g.email = "billing@" + slug(g.company) + ".example"
	}
	if p := rePlanName.FindStringSubmatch(text); p != nil {
		g.plan = strings.ToLower(p[1])
	}
	if a := reAmount.FindStringSubmatch(text); a != nil {
		g.amount = a[1]
		if a[2] != "" && !strings.EqualFold(a[2], "for") {
			g.currency = strings.ToUpper(a[2])
		}
	}
	has := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(lower, w) {
				return true
			}
		}
		return false
	}
	wantInvoice := has("invoice", "bill ")
	if has("price") || (wantInvoice && g.amount == "") {
		g.steps = append(g.steps, "catalogue_price")
	}
	if has("contact", "crm") {
		g.steps = append(g.steps, "crm_create_contact")
	}
	if wantInvoice {
		g.steps = append(g.steps, "payments_create_invoice")
	}
	if has("setting") {
		g.steps = append(g.steps, "settings_put")
	}
	if has("email", "welcome", "mail ") {
		g.steps = append(g.steps, "email_send")
	}
	return g, true
}

func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "customer"
	}
	return b.String()
}

// Reply computes the assistant's next message for req and a prompt token
// estimate. It is exported for tests and for callers that want the script
// without HTTP.
func Reply(req openai.ChatCompletionRequest) (openai.ChatCompletionMessage, int) {
	prompt := 0
	lastUser := -1
	for i, m := range req.Messages {
		prompt += (len(m.Content) + 16) / 4
		if m.Role == openai.ChatMessageRoleUser {
			lastUser = i
		}
	}
	assistant := func(text string) (openai.ChatCompletionMessage, int) {
		return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: text}, prompt
	}
	if lastUser < 0 {
		return assistant("Tell me what to do, for example: onboard ACME: create the CRM contact, invoice 1200 EUR, email the welcome pack.")
	}
	offered := map[string]bool{}
	for _, t := range req.Tools {
		if t.Function != nil {
			offered[t.Function.Name] = true
		}
	}
	// A goal it cannot plan is refused (the wire's "refusal" field), so the
	// planner reports it instead of recording an empty plan as if nothing
	// needed doing.
	refuse := func(why string) (openai.ChatCompletionMessage, int) {
		text := why + " " + Knows(offered)
		return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: text, Refusal: text}, prompt
	}
	g, ok := understand(req.Messages[lastUser].Content)
	if !ok {
		return refuse("docket's demo model cannot plan this goal: it is a scripted stand-in for a real model.")
	}
	// What happened since the user's message: calls made (by tool name) and
	// their results (by call id).
	calls := map[string]openai.ToolCall{}
	results := map[string]string{}
	nCalls := 0
	for _, m := range req.Messages[lastUser+1:] {
		switch m.Role {
		case openai.ChatMessageRoleAssistant:
			for _, c := range m.ToolCalls {
				calls[c.Function.Name] = c
				nCalls++
			}
		case openai.ChatMessageRoleTool:
			results[m.ToolCallID] = m.Content
		}
	}
	st := state{g: g, calls: calls, results: results}
	for _, name := range g.steps {
		if !offered[name] {
			continue
		}
		if _, done := calls[name]; done {
			continue
		}
		args := st.args(name)
		b, err := json.Marshal(args)
		if err != nil {
			return assistant("internal error: " + err.Error())
		}
		call := openai.ToolCall{
			ID:       "call_" + strconv.Itoa(nCalls+1),
			Type:     openai.ToolTypeFunction,
			Function: openai.FunctionCall{Name: name, Arguments: string(b)},
		}
		return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{call}}, prompt
	}
	if len(calls) == 0 {
		return refuse(fmt.Sprintf("docket's demo model understood that %s should be onboarded, but the goal names no step it can plan.", g.company))
	}
	return assistant(st.summary())
}

// steps are what the demo model can plan: the words of a goal that select a
// step, and the demo world's tool that performs it, in call order.
var steps = []struct{ words, tool string }{
	{"price", "catalogue_price"},
	{"contact/crm", "crm_create_contact"},
	{"invoice AMOUNT CUR", "payments_create_invoice"},
	{"settings", "settings_put"},
	{"email/welcome", "email_send"},
}

// Knows says, in a few lines, what the demo model understands given the
// tools offered (nil: any), and how to plan anything else.
func Knows(offered map[string]bool) string {
	var known []string
	for _, st := range steps {
		if offered == nil || offered[st.tool] {
			known = append(known, st.words+" → "+st.tool)
		}
	}
	if len(known) == 0 {
		known = []string{"none: the demo world's tools are not offered"}
	}
	return `It knows "onboard COMPANY: ..." with these steps: ` + strings.Join(known, ", ") +
		`; e.g. "onboard ACME: create the CRM contact, invoice 1200 EUR, email the welcome pack". ` +
		"Other goals need a real model (OPENAI_MODEL, OPENAI_BASE_URL, OPENAI_API_KEY) or a plan."
}

type state struct {
	g       goal
	calls   map[string]openai.ToolCall
	results map[string]string
}

// ref returns a reference to a queued action's output field, or fallback when
// the tool was not called or its call was not queued.
func (s state) ref(tool, field string, fallback any) any {
	c, ok := s.calls[tool]
	if !ok {
		return fallback
	}
	var ph struct {
		Queued   bool   `json:"queued"`
		ActionID string `json:"action_id"`
	}
	if json.Unmarshal([]byte(s.results[c.ID]), &ph) != nil || !ph.Queued || ph.ActionID == "" {
		return fallback
	}
	return "${" + ph.ActionID + ".output." + field + "}"
}

// price returns the amount and currency: from the goal, else from the
// catalogue's answer (a read-only result is a value the model can use).
func (s state) price() (any, string) {
	if s.g.amount != "" {
		n, _ := strconv.Atoi(s.g.amount)
		return n, s.g.currency
	}
	if c, ok := s.calls["catalogue_price"]; ok {
		var p struct {
			Amount   json.Number `json:"amount"`
			Currency string      `json:"currency"`
		}
		if json.Unmarshal([]byte(s.results[c.ID]), &p) == nil && p.Amount != "" {
			if n, err := p.Amount.Int64(); err == nil {
				return n, p.Currency
			}
		}
	}
	return 1200, s.g.currency
}

func (s state) args(tool string) map[string]any {
	contactID := s.ref("crm_create_contact", "id", slug(s.g.company))
	switch tool {
	case "catalogue_price":
		return map[string]any{"plan": s.g.plan}
	case "crm_create_contact":
		return map[string]any{"company": s.g.company, "email": s.g.email}
	case "payments_create_invoice":
		amount, currency := s.price()
		return map[string]any{"customer": contactID, "amount": amount, "currency": currency, "reference": "onboarding-" + slug(s.g.company)}
	case "settings_put":
		settings := map[string]any{"plan": s.g.plan}
		if inv := s.ref("payments_create_invoice", "id", nil); inv != nil {
			settings["invoice"] = inv
		}
		return map[string]any{"account": contactID, "settings": settings}
	case "email_send":
		a := map[string]any{"to": s.g.email, "template": "welcome-pack"}
		if id := s.ref("crm_create_contact", "id", nil); id != nil {
			a["contact_id"] = id
		}
		return a
	}
	return map[string]any{}
}

func (s state) summary() string {
	var parts []string
	for _, name := range s.g.steps {
		if _, ok := s.calls[name]; !ok {
			continue
		}
		switch name {
		case "catalogue_price":
			parts = append(parts, "looked up the "+s.g.plan+" plan's price")
		case "crm_create_contact":
			parts = append(parts, "create the CRM contact "+s.g.email)
		case "payments_create_invoice":
			amount, currency := s.price()
			parts = append(parts, fmt.Sprintf("invoice %v %s", amount, currency))
		case "settings_put":
			parts = append(parts, "set the account settings")
		case "email_send":
			parts = append(parts, "email the welcome pack")
		}
	}
	return fmt.Sprintf("Plan to onboard %s: %s. Nothing has happened yet: review and approve it.", s.g.company, strings.Join(parts, ", "))
}
