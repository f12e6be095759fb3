package memory

import (
	"context"
	"fmt"

	"github.com/docketrun/docket/ledger"
)

var _ ledger.ScheduleKeeper = (*Store)(nil)

// write runs fn with the state locked for writing, unless the store is
// closed.
func (s *Store) write(ctx context.Context, fn func(st *state) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ledger.ErrClosed
	}
	if s.st.schedules == nil {
		s.st.schedules = map[string][]byte{}
	}
	return fn(&s.st)
}

func (st *state) schedule(id string) (ledger.Schedule, bool, error) {
	b, ok := st.schedules[id]
	if !ok {
		return ledger.Schedule{}, false, nil
	}
	sc, err := ledger.DecodeSchedule(b)
	return sc, true, err
}

func (st *state) putSchedule(sc ledger.Schedule) error {
	b, err := ledger.EncodeSchedule(sc)
	if err == nil {
		st.schedules[sc.ID] = b
	}
	return err
}

// CreateSchedule stores a new schedule (ledger.ScheduleKeeper).
func (s *Store) CreateSchedule(ctx context.Context, sc ledger.Schedule) (out ledger.Schedule, err error) {
	err = s.write(ctx, func(st *state) error {
		stored, found, err := st.schedule(sc.ID)
		if err != nil {
			return err
		}
		var write bool
		if out, write, err = ledger.ScheduleCreate(stored, found, sc); err != nil || !write {
			return err
		}
		return st.putSchedule(out)
	})
	return out, err
}

// Schedule returns a schedule (ledger.ScheduleKeeper). Errors: ErrNotFound,
// ErrClosed.
func (s *Store) Schedule(ctx context.Context, id string) (sc ledger.Schedule, err error) {
	err = s.read(ctx, func(st *state) error {
		var found bool
		if sc, found, err = st.schedule(id); err == nil && !found {
			err = fmt.Errorf("%w: schedule %q", ledger.ErrNotFound, id)
		}
		return err
	})
	return sc, err
}

// Schedules returns every schedule, by id (ledger.ScheduleKeeper).
func (s *Store) Schedules(ctx context.Context) (all []ledger.Schedule, err error) {
	err = s.read(ctx, func(st *state) error {
		for id := range st.schedules {
			sc, _, err := st.schedule(id)
			if err != nil {
				return err
			}
			all = append(all, sc)
		}
		return nil
	})
	ledger.SortSchedules(all)
	return all, err
}

// SwapSchedule replaces a schedule at its version (ledger.ScheduleKeeper).
func (s *Store) SwapSchedule(ctx context.Context, sc ledger.Schedule) (out ledger.Schedule, err error) {
	err = s.write(ctx, func(st *state) error {
		stored, found, err := st.schedule(sc.ID)
		if err != nil {
			return err
		}
		if out, err = ledger.ScheduleSwap(stored, found, sc); err != nil {
			return err
		}
		return st.putSchedule(out)
	})
	return out, err
}

// DeleteSchedule removes a schedule (ledger.ScheduleKeeper). Errors:
// ErrNotFound, ErrClosed.
func (s *Store) DeleteSchedule(ctx context.Context, id string) error {
	return s.write(ctx, func(st *state) error {
		if _, ok := st.schedules[id]; !ok {
			return fmt.Errorf("%w: schedule %q", ledger.ErrNotFound, id)
		}
		delete(st.schedules, id)
		return nil
	})
}
