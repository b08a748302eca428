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
	return s.ScanSlots(ctx, shardName, opts, nil, emit)
}

// ScanSlots is Scan for one of many followers that share slots, a
// semaphore (a send takes a slot, a receive gives it back; nil: no
// bound): the follower holds records of its own, reading on its own or
// building batches from what the shared reader brought, only while it
// holds a slot. So followers that share slots and one emit (a
// subscription's shards, sending on one stream) hold at most len(slots)
// reads and batches at once however many they are; what waits meanwhile
// is their buffers, which hold records the reader shares.
func (s *Set) ScanSlots(ctx context.Context, shardName string, opts shard.ScanOptions, slots chan struct{}, emit func(shard.Batch) error) error {
	f, err := s.r.NewFollower(shardName, opts, emit)
	if err != nil {
		return err
	}
	err = s.follow(ctx, shardName, &scanFollower{f: f, slots: slots})
	if errors.Is(err, shard.ErrScanDone) {
		return nil
	}
	return err
}

// scanFollower is one Scan's shard.Follower and the slots it takes to hold
// records.
type scanFollower struct {
	f     *shard.Follower
	slots chan struct{}
}

// take waits for a slot; nil slots need none.
func (f *scanFollower) take(ctx context.Context) error {
	if f.slots == nil {
		return nil
	}
	select {
	case f.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *scanFollower) give() {
	if f.slots != nil {
		<-f.slots
	}
}

// catchUp is Follower.CatchUp in a slot.
func (f *scanFollower) catchUp(ctx context.Context) (bool, error) {
	if err := f.take(ctx); err != nil {
		return false, err
	}
	defer f.give()
	return f.f.CatchUp(ctx)
}

func (s *Set) follow(ctx context.Context, shardName string, fs *scanFollower) error {
	f := fs.f
	for {
		sub, err := s.join(shardName, f.Position(), false)
		if err != nil {
			return err
		}
		if sub == nil {
			// Nobody reads the shard yet: read up to its tail on our own,
			// and start its reader there.
			if _, err := fs.catchUp(ctx); err != nil {
				return err
			}
			if sub, err = s.join(shardName, f.Position(), true); err != nil {
				return err
			}
		}
		stale, err := s.ride(ctx, fs, sub)
		sub.leave()
		if err != nil {
			return err
		}
		if stale {
			// The reader handed out another incarnation's records. Read on
			// our own, which ends a deleted shard's follower; then give the
			// reader a moment to notice before joining it again.
			if _, err := fs.catchUp(ctx); err != nil {
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
func (s *Set) ride(ctx context.Context, fs *scanFollower, sub *sub) (stale bool, err error) {
	f := fs.f
	// What the reader handed out before we joined, we read ourselves. The
	// reader only hands out committed records, so our reads reach sub.from
	// unless the shard was deleted meanwhile, which the reader will see.
	for f.Position().Seq() < sub.from {
		moved, err := fs.catchUp(ctx)
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
		stale, dropped, err := s.deliver(ctx, fs, sub)
		if err != nil || stale || dropped {
			return stale, err
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-sub.ready:
		}
	}
}

// deliver delivers what sub's buffer holds, in a slot.
func (s *Set) deliver(ctx context.Context, fs *scanFollower, sub *sub) (stale, dropped bool, err error) {
	if err := fs.take(ctx); err != nil {
		return false, false, err
	}
	defer fs.give()
	recs, dropped := sub.take()
	for _, r := range recs {
		ok, err := fs.f.Deliver(r)
		if err != nil {
			return false, false, err
		}
		if !ok {
			return true, false, fs.f.Flush()
		}
	}
	return false, dropped, fs.f.Flush()
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
