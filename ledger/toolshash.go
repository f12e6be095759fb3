package ledger

import "fmt"

// SetToolsHash records that run runID now runs with the tool definitions
// whose hash is hash (someone accepted a change of the tools file, executor/README.md,
// "Runs, revisions, forks"), so that later resumes with the same tools are
// not asked again. The run's ToolsHash becomes hash and event
// run.tools_changed {"from", "to"} is appended in the same commit. A run that
// already has hash is left as it is (no event): an identical repeat is
// success. Op errors: ErrNotFound (no such run), ErrInvalid (empty hash or
// run id).
func SetToolsHash(runID, hash string) Op {
	return Op{body: &setToolsHashOp{runID: runID, hash: hash}}
}

type setToolsHashOp struct{ runID, hash string }

func (o *setToolsHashOp) kind() opKind               { return opSetToolsHash }
func (o *setToolsHashOp) scope() (string, *bigValue) { return o.runID, nil }

func (o *setToolsHashOp) eval(bv batch) (Result, error) {
	b := &bv // on the stack: bodies are called through an interface
	if err := validID("run id", o.runID); err != nil {
		return errResult(err), nil
	}
	if o.hash == "" {
		return errResult(fmt.Errorf("%w: run %q: empty tools hash", ErrInvalid, o.runID)), nil
	}
	run, ok, err := b.run(o.runID)
	if err != nil {
		return opFailure(err)
	}
	if !ok {
		return errResult(fmt.Errorf("%w: run %q", ErrNotFound, o.runID)), nil
	}
	if run.ToolsHash == o.hash {
		return Result{run: run.Run}, nil
	}
	from := run.ToolsHash
	run.ToolsHash = o.hash
	if err := b.touch(run); err != nil {
		return Result{}, err
	}
	if err := b.event(o.runID, EventRunToolsChanged, "", obj("from", from, "to", o.hash)); err != nil {
		return Result{}, err
	}
	return Result{run: run.Run}, nil
}
