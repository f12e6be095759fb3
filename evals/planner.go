package evals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/tools"
)

// PlannerFunc plans cases with docket's planner: cfg is used for every case
// with Tools set to the case's registry (one planner per registry, made on
// first use). Give cfg.HTTPClient a Recorder or a Replayer to record or
// replay the model exchanges.
func PlannerFunc(cfg planner.Config) PlanFunc {
	var mu sync.Mutex
	made := map[any]*planner.Planner{}
	get := func(c0 *Case) (*planner.Planner, error) {
		mu.Lock()
		defer mu.Unlock()
		// cases share a planner when they share tools and observations
		// (the observations answer the read-only tools)
		type plannerKey struct {
			reg *tools.Registry
			obs string
		}
		key := plannerKey{reg: c0.Registry()}
		if c0.hasReadOnly() && len(c0.Observations) > 0 {
			b, _ := json.Marshal(c0.Observations)
			key.obs = string(b)
		}
		if p, ok := made[key]; ok {
			return p, nil
		}
		reg, err := planningRegistry(c0)
		if err != nil {
			return nil, err
		}
		c := cfg
		c.Tools = reg
		p, err := planner.New(c)
		if err != nil {
			return nil, err
		}
		made[key] = p
		return p, nil
	}
	return func(ctx context.Context, c *Case, try int) (PlanLine, error) {
		if c.Registry() == nil {
			return PlanLine{}, fmt.Errorf("case %s has no tools", c.ID)
		}
		p, err := get(c)
		if err != nil {
			return PlanLine{}, err
		}
		req := planner.Request{Goal: c.Goal}
		for _, m := range c.Messages {
			req.Messages = append(req.Messages, planner.Message{Role: m.Role, Content: m.Content})
		}
		res, err := p.Plan(ctx, req)
		if err != nil {
			return PlanLine{}, err
		}
		return PlanLine{
			Calls: CallsFromPlan(res.Plan),
			Usage: &Usage{PromptTokens: res.Usage.PromptTokens, CompletionTokens: res.Usage.CompletionTokens, TotalTokens: res.Usage.TotalTokens, Requests: res.Rounds},
		}, nil
	}
}

// RetryablePlannerError reports whether a planner error may go away by
// planning again (rate limits, server errors, timeouts).
func RetryablePlannerError(err error) bool {
	var me *planner.ModelError
	return errors.As(err, &me) && me.Retryable()
}

func (c *Case) hasReadOnly() bool {
	if c.reg == nil {
		return false
	}
	for _, n := range c.reg.Names() {
		if s, _ := c.reg.Spec(n); s.Class == tools.ReadOnly {
			return true
		}
	}
	return false
}

// planningRegistry is the case's registry with every read_only tool
// answered from the case's observations, and every other tool unable to run
// (the planner only queues them).
func planningRegistry(c *Case) (*tools.Registry, error) {
	if !c.hasReadOnly() {
		return c.reg, nil
	}
	var ts []tools.Tool
	for _, n := range c.reg.Names() {
		s, _ := c.reg.Spec(n)
		switch s.Class {
		case tools.ReadOnly:
			ts = append(ts, &observedTool{spec: s, obs: c.Observations})
		case tools.Lookup:
			ts = append(ts, &specLooker{specTool{spec: s}})
		default:
			ts = append(ts, &specTool{spec: s})
		}
	}
	return tools.NewRegistry(ts...)
}

// observedTool answers a read_only tool from a case's observations.
type observedTool struct {
	spec tools.Spec
	obs  []Observation
}

var _ tools.Tool = (*observedTool)(nil)

func (t *observedTool) Spec() tools.Spec { return t.spec }

func (t *observedTool) Call(_ context.Context, call tools.Call) (json.RawMessage, error) {
	args, err := parseValue(call.Args)
	if err != nil {
		return nil, tools.Permanent(fmt.Errorf("arguments are not JSON: %v", err))
	}
	var fallback json.RawMessage
	for _, o := range t.obs {
		if o.Tool != t.spec.Name {
			continue
		}
		if len(o.Args) == 0 {
			if fallback == nil {
				fallback = o.Output
			}
			continue
		}
		if want, err := parseValue(o.Args); err == nil && pyEqual(want, args) {
			return o.Output, nil
		}
	}
	if fallback != nil {
		return fallback, nil
	}
	return nil, tools.Permanent(fmt.Errorf("%s found nothing for %s", t.spec.Name, call.Args))
}
