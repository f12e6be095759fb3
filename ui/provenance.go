package ui

import (
	"net/http"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/plan"
)

// serverMeta are the plan Meta keys that say where a plan came from: the
// planner's (model, prompt and tools hashes, usage), the MCP server's, the
// request identity and the submitter. Only docket writes them: in a plan
// submitted through the API, each one it carries is kept as claimed_KEY.
var serverMeta = []string{
	"planner", "model", "mode", "prompt_hash", "tools_hash", "served_model",
	"prompt_tokens", "completion_tokens", "total_tokens", "rounds", "repairs",
	"source", "mcp_session", "call_hash", "submitted_by", executor.RequestMeta,
}

// stampSubmitted makes a submitted plan's provenance the server's: the
// keys of serverMeta the client sent move to claimed_KEY (what docket plan
// recorded stays readable, marked as the client's word), and source
// ("api") and submitted_by (the caller, "token:NAME") are set. Meta is not
// part of the plan's hash, so a run's identity is unchanged.
func stampSubmitted(p *plan.Plan, r *http.Request) {
	if p.Meta == nil {
		p.Meta = map[string]string{}
	}
	for _, k := range serverMeta {
		if v, ok := p.Meta[k]; ok && k != executor.RequestMeta {
			p.Meta["claimed_"+k] = v
		}
		delete(p.Meta, k)
	}
	p.Meta["source"] = "api"
	p.Meta["submitted_by"] = who(r)
}
