// Package planner turns a goal, or a conversation, into a validated plan with a
// language model over any OpenAI-compatible chat-completions endpoint (OpenAI,
// Azure OpenAI, Ollama, vLLM, llama.cpp's server, LM Studio), using
// github.com/sashabaranov/go-openai.
//
// # The planning loop (ModeTools)
//
// Every registered tool is offered to the model as a function. Tools of class
// read_only run at once while the model thinks (executor/README.md, "Side effects come
// last"): their results go back to the model and into the plan's transcript,
// and they touch no ledger record. A call to a tool of any other class is not
// executed: it becomes a queued plan action ("a1", "a2", ...) and the model
// receives a placeholder result carrying references it can pass to later calls
// ("${a1.output}", "${a1.output.id}"). A reference in a call's arguments makes
// the action depend on the referenced one. When the model replies without
// tool calls, the queued actions are the plan.
//
// # Order
//
// Order reaches the plan two ways. Data: a reference orders the referencing
// action after the referenced one. Turns (Config.Order OrderTurns, the
// default): a model that makes a call in a later message has seen the
// placeholders of the actions it queued before, so it chose to wait; the
// later call depends on the actions queued by the most recent earlier
// message that queued any (and so, transitively, on all earlier ones). The
// system prompt says so: "email the customer after the refund" is two
// messages, and the email runs after the refund although it uses none of its
// output. Calls made together in one message are independent and stay
// parallel; read-only calls order nothing (they ran already). The cost: a
// model that makes one call per message orders everything, so its plans run
// one action at a time (correct, slower); OrderReferences restores ordering
// by data only (docket before issue 18). A rejected call made again in a
// later message is ordered after what the earlier message queued.
// ModeJSONSchema plans carry their own depends_on.
//
// A call that cannot be queued (unknown tool, arguments that are not JSON or do
// not fit the tool's schema, a reference to an action that does not exist yet)
// is answered with the problem as its tool result; each reply holding such a
// call uses one of Config.MaxRepairs repairs. The finished plan is validated as
// a whole (plan.Validate against the registry) before it is returned; a plan
// that is still invalid is never returned, only a *PlanningError listing every
// problem.
//
// # Tool definitions
//
// Definitions are sent in the strict form (strict: true, every object
// additionalProperties: false, every property required, optional properties
// made nullable). Nulls the model sends for optional properties are dropped
// before validation, so arguments are recorded as if the model had left them
// out. A tool whose schema cannot be expressed strictly without changing its
// meaning (free-form objects, additionalProperties schemas, $ref, oneOf/allOf,
// conditionals) is sent with strict: false and its schema unchanged. Registry
// names are mapped to the alphabet the API allows ([a-zA-Z0-9_-], at most 64
// bytes: "crm.create" becomes "crm_create", a name that collides or is too
// long gets a short hash suffix) and mapped back in every reply.
//
// # Structured output (ModeJSONSchema)
//
// For models without tool calling, the planner asks for one JSON object
// {"actions": [...]} with response_format json_schema, whose items are one
// branch per tool (tool name as an enum, its strict argument schema). Nothing
// runs while such a model thinks. Problems go back as a user message for a
// bounded number of repairs.
//
// # The wire
//
// 429, 408 and 5xx answers, connection failures, unreadable bodies and
// per-request timeouts (Config.Timeout) are retried with exponential backoff
// and full jitter, honouring Retry-After (and retry-after-ms); other 4xx
// answers fail at once with a *ModelError, and a request go-openai refuses
// before sending it (parameters a reasoning model does not take) is an
// ErrConfig error. Temperature 0 is sent as the smallest positive float32,
// because go-openai omits a zero temperature. A reply cut off by its token limit (finish_reason "length"),
// stopped by a content filter or refused is never turned into a plan. Invalid
// JSON arguments, unknown tool names, duplicate or missing tool call ids,
// content next to tool calls (kept as the actions' "why") and empty replies
// are handled as documented on Plan.
//
// # Servers
//
// OpenAI-compatible servers differ; the planner copes with what vLLM,
// llama.cpp, Ollama, LM Studio, DeepSeek and gateways are known to do, and
// says what it did once per Planner (a Warn log) and in every planning's
// Result.Warnings and exchange "notes": tool call arguments sent as JSON
// objects are re-encoded; a whole JSON answer that is not a chat completion
// is a *ModelError naming what was wrong, never retried (only a body cut off
// is retried, as a transport failure); an HTTP 400 refusing "strict" makes
// the planner leave "strict" out from then on and send the request again
// (Config.Strict "off" never sends it); tool calls written as text in the
// content (Hermes <tool_call>{...}</tool_call>, Mistral's [TOOL_CALLS] in
// both its forms, Llama's <function=name>{...}</function>, a call as JSON,
// fenced or bare: {"name", "arguments"}, a list of them or {"tool_calls":
// [...]}) are read as calls with a warning that the server's tool parser is
// off; such text that is not a call, or a reply without tool calls that
// still writes a call in a form none of these is (a tool's name and "(", a
// JSON member naming a tool), fails the planning (ReasonTextCalls) with the
// model's answer quoted, never an empty plan (after queued actions it is a
// warning); a tool name with a namespace ("functions.send_email") is the
// tool; arguments encoded twice (a JSON string holding the JSON text) are
// decoded once more; an answer streamed (server-sent events) to a request
// that did not ask for a stream is read as the stream, not retried; in
// ModeJSONSchema the plan object is found after prose, a fence or a
// <think>...</think> block. Config.ToolChoice and Config.ParallelToolCalls
// are sent as tool_choice and parallel_tool_calls when set.
//
// # Streaming
//
// With Config.Stream "on", or "auto" (the default) when the planning has a
// progress function (WithProgress), replies are streamed (stream: true,
// stream_options.include_usage) and each step is reported as it happens:
// the model's text in pieces, each tool call as soon as the model finished
// writing it, each queued action, read-only calls, rejected calls. Nothing
// is recorded before planning ends, so a crash while the model thinks still
// records nothing. The streamed reply is recorded in the exchange as the
// chat completion it assembles into ("streamed": true). A server that
// refuses a streamed request (HTTP 400) or answers it with one JSON reply is
// asked without streaming. A server that only streams (an HTTP 400 asking
// for stream: true, or a stream answered to a request without it) is asked
// for streamed replies from then on, unless Config.Stream is "off" (then the
// error says so).
//
// # Recording
//
// Plan is pure: it records nothing, and the package does not import the
// executor. A run is planned once by executor/runs, which calls Plan only
// when the ledger holds no plan for the run yet and records the new plan
// durably before any action is claimed; Recorded reads a recorded plan back
// as a Result. A crash while thinking therefore leaves nothing recorded, and
// the next attempt plans again. The plan carries its provenance
// in Meta (model, prompt hash over the system prompt and the tool definitions,
// tools hash, token usage, rounds, repairs) and the whole model exchange in
// Transcript. The API key never appears in either, in errors or in logs: the
// exchange records bodies, never headers, and any text holding the key is
// redacted.
//
// Request and Result carry docket's own Message (the OpenAI chat JSON
// shape); go-openai's types are used only to talk to the model and never
// appear in planner's API, so upgrading go-openai changes neither the library
// API nor the HTTP API built on it. Provenance is typed (Provenance,
// ReadProvenance).
//
// Imports: the standard library, github.com/sashabaranov/go-openai (inside
// the package only), the OpenTelemetry API (go.opentelemetry.io/otel: model
// call spans, no SDK), and docket's plan, tools (with tools/policy, the rules
// it tells the model about and answers denied calls with) and ledger
// packages, and tools/httpspan (HTTP client spans; it imports
// nothing of docket). Never the executor: executor/runs records and drives
// planned runs.
// planner/demomodel, the demo's scripted model, imports only the standard
// library and go-openai.
package planner
