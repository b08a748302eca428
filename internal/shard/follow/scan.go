package follow

import (
	"context"
	"errors"
	"time"

	"github.com/rolloutd/rolloutd/internal/shard"
)

// Scan is a following shard.Reader.Scan of shardName (opts.Follow is
// implied) that shares the shard's reader with every other follower of the
// Set: it delivers the same batches, with the same filter, projection,
// limit and errors, and ends only by ctx, the limit, emit's error or a
// read's. opts.PollMin paces its own reads while it waits to join; the
// Set's options pace the shared reader.
func (s *Set) Scan(ctx context.Context, shardName string, opts shard.ScanOptions, emit func(shard.Batch) error) error {
	f, err := s.r.NewFollower(shardName, opts, emit)
	if err != nil {
		return err
	}
	err = s.follow(ctx, shardName, f)
	if errors.Is(err, shard.ErrScanDone) {
		return nil
	}
	return err
}

func (s *Set) follow(ctx context.Context, shardName string, f *shard.Follower) error {
	for {
		sub, err := s.join(shardName, f.Position(), false)
		if err != nil {
			return err
		}
		if sub == nil {
			// Nobody reads the shard yet: read up to its tail on our own,
			// and start its reader there.
			if _, err := f.CatchUp(ctx); err != nil {
				return err
			}
			if sub, err = s.join(shardName, f.Position(), true); err != nil {
				return err
			}
		}
		stale, err := s.ride(ctx, f, sub)
		sub.leave()
		if err != nil {
			return err
		}
		if stale {
			// The reader handed out another incarnation's records. Read on
			// our own, which ends a deleted shard's follower; then give the
			// reader a moment to notice before joining it again.
			if _, err := f.CatchUp(ctx); err != nil {
				return err
			}
			if err := pause(ctx, nil, s.opts.PollMin); err != nil {
				return err
			}
		}
	}
}

// ride delivers what sub brings until the follower is dropped from it
// (nil, to catch up on its own and join again), sees another
// incarnation's records (stale), or fails.
func (s *Set) ride(ctx context.Context, f *shard.Follower, sub *sub) (stale bool, err error) {
	// What the reader handed out before we joined, we read ourselves. The
	// reader only hands out committed records, so our reads reach sub.from
	// unless the shard was deleted meanwhile, which the reader will see.
	for f.Position().Seq() < sub.from {
		moved, err := f.CatchUp(ctx)
		if err != nil {
			return false, err
		}
		if !moved {
			if err := pause(ctx, sub.ready, s.opts.PollMin); err != nil {
				return false, err
			}
			if sub.isDropped() {
				return false, nil
			}
		}
	}
	for {
		recs, dropped := sub.take()
		for _, r := range recs {
			ok, err := f.Deliver(r)
			if err != nil {
				return false, err
			}
			if !ok {
				return true, f.Flush()
			}
		}
		if err := f.Flush(); err != nil {
			return false, err
		}
		if dropped {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-sub.ready:
		}
	}
}

// pause waits for d, or until wake is signalled, or ctx ends.
func pause(ctx context.Context, wake <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-wake:
	case <-t.C:
	}
	return nil
}
