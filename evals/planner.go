package evals

import (
	"context"
	"errors"
	"fmt"
	"sync"

	openai "github.com/sashabaranov/go-openai"

	"github.com/docketrun/docket/planner"
	"github.com/docketrun/docket/tools"
)

// PlannerFunc plans cases with docket's planner: cfg is used for every case
// with Tools set to the case's registry (one planner per registry, made on
// first use). Give cfg.HTTPClient a Recorder or a Replayer to record or
// replay the model exchanges.
func PlannerFunc(cfg planner.Config) PlanFunc {
	var mu sync.Mutex
	made := map[*tools.Registry]*planner.Planner{}
	get := func(reg *tools.Registry) (*planner.Planner, error) {
		mu.Lock()
		defer mu.Unlock()
		if p, ok := made[reg]; ok {
			return p, nil
		}
		c := cfg
		c.Tools = reg
		p, err := planner.New(c)
		if err != nil {
			return nil, err
		}
		made[reg] = p
		return p, nil
	}
	return func(ctx context.Context, c *Case, try int) (PlanLine, error) {
		if c.Registry() == nil {
			return PlanLine{}, fmt.Errorf("case %s has no tools", c.ID)
		}
		p, err := get(c.Registry())
		if err != nil {
			return PlanLine{}, err
		}
		req := planner.Request{Goal: c.Goal}
		for _, m := range c.Messages {
			req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: m.Role, Content: m.Content})
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
