package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"
)

// The writer set's backoff of opens that keep failing (see writerSet).

// maxReopenBackoff caps the wait between two opens of one shard that keep
// failing: once its store heals, a shard serves again within about this.
const maxReopenBackoff = 2 * time.Second

// The set forgets a shard's failed opens once it has more than
// maxFailingShards and that shard's backoff ended forgetFailedOpen ago, so
// that shards written once and never again cannot grow it without bound.
const (
	maxFailingShards = 1024
	forgetFailedOpen = time.Minute
)

// reopen is the backoff of a shard whose opens fail in a row.
type reopen struct {
	fails int       // failed opens in a row
	at    time.Time // no open before
	last  error     // the last open's error
}

// openFailedLocked records a failed open of shardName and sets when the
// next may start: a jittered delay that starts at the append retry backoff
// and doubles with each failure in a row, up to maxReopenBackoff. The
// caller holds mu.
func (s *writerSet) openFailedLocked(shardName string, err error) {
	if len(s.failing) >= maxFailingShards {
		// Forget shards no request came back for: their next open starts
		// its backoff afresh.
		for name, r := range s.failing {
			if time.Since(r.at) > forgetFailedOpen {
				delete(s.failing, name)
			}
		}
	}
	r := s.failing[shardName]
	if r == nil {
		r = &reopen{}
		s.failing[shardName] = r
	}
	r.fails++
	r.last = err
	d := maxReopenBackoff
	if base := max(s.retry.backoff, time.Millisecond); r.fails < 32 && base<<(r.fails-1) < d {
		d = base << (r.fails - 1)
	}
	d = d/2 + rand.N(d/2+1)
	r.at = time.Now().Add(d)
	s.metrics.openBackoffs.Inc()
	s.log.Warn("opening a shard writer failed; the next open backs off", zap.String("shard", shardName),
		zap.Int("failed_opens", r.fails), zap.Duration("backoff", d), zap.Error(err))
}

// reopenBackoffLocked refuses a request for shardName, whose writer must be
// opened, when its opens are backing off until past ctx's deadline: the
// request would only wait for its deadline. Its error is the last open's,
// which stored nothing. The caller holds mu.
func (s *writerSet) reopenBackoffLocked(ctx context.Context, shardName string) error {
	r := s.failing[shardName]
	if r == nil {
		return nil
	}
	dl, ok := ctx.Deadline()
	if !ok || !dl.Before(r.at) {
		return nil
	}
	return fmt.Errorf("shard %q: its last %d opens failed, and the next waits %v, past this call's deadline: %w",
		shardName, r.fails, time.Until(r.at).Round(time.Millisecond), r.last)
}
