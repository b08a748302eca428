package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// partitionLedger sorts every answered append of a partition run.
type partitionLedger struct {
	*ledger
	mu           sync.Mutex
	notCommitted []string
	doubtful     []string
}

// answer records one Append's answer. deadline is the call's; a
// DEADLINE_EXCEEDED before it passed is an error of the test.
func (l *partitionLedger) answer(t *testing.T, shardName, id string, r *rolloutv1.AppendResult, err error, sent, deadline time.Time) {
	if err == nil {
		l.add(t, shardName, []string{id}, []uint64{r.GetSeq()})
		return
	}
	st := status.Convert(err)
	if st.Code() == codes.DeadlineExceeded && time.Now().Before(deadline) {
		t.Errorf("append %s: DEADLINE_EXCEEDED %v before its deadline (sent %v before it): %v", id, time.Until(deadline), deadline.Sub(sent), err)
	}
	reason := detailsOf(t, st).reason(t)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch reason {
	case rolloutv1.ErrorReason_NOT_COMMITTED.String():
		l.notCommitted = append(l.notCommitted, id)
	case rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String(), "":
		// No reason: the client's own deadline ended the call first.
		l.doubtful = append(l.doubtful, id)
	default:
		t.Errorf("append %s: %v", id, err)
	}
}

// settle resends every doubtful append through c until it is answered,
// and checks that nothing answered NOT_COMMITTED is stored.
func (l *partitionLedger) settle(t *testing.T, c rolloutv1.RolloutServiceClient, shardName string) {
	for _, id := range l.doubtful {
		r, err := appendOne(rpcCtx(t), c, shardName, id)
		if err != nil {
			t.Errorf("resend of doubtful %s after the heal: %v", id, err)
			continue
		}
		l.add(t, shardName, []string{id}, []uint64{r.GetSeq()})
	}
	for _, id := range l.notCommitted {
		if _, err := c.Get(rpcCtx(t), &rolloutv1.GetRequest{Shard: shardName, Id: id}); status.Code(err) != codes.NotFound {
			t.Errorf("%s was answered NOT_COMMITTED; Get: %v", id, err)
		}
	}
}

// Finding 1 end to end: two instances append to one shard while its log
// names are cut off (every call hangs) for 2 x CommitTimeout, then heal.
// Within 5 s of the heal, new appends succeed on both instances, which
// never restarted; every acknowledged append is readable exactly once;
// nothing answered NOT_COMMITTED is stored; and no answer is
// DEADLINE_EXCEEDED before its call's deadline.
func TestPartitionOfTheLogHeals(t *testing.T) {
	const commitTimeout = 200 * time.Millisecond
	fs := faultstore.New(memstore.New(), 1)
	cfg := func() Config {
		c := Config{Store: fs, Writer: testWriterOptions(t)}
		c.Writer.CommitTimeout = commitTimeout
		return c
	}
	a, b := startServer(t, cfg()), startServer(t, cfg())
	l := &partitionLedger{ledger: newLedger()}
	const shardName = "part"
	appendVia := func(c rolloutv1.RolloutServiceClient, id string) error {
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		deadline, _ := ctx.Deadline()
		r, err := appendOne(ctx, c, shardName, id)
		l.answer(t, shardName, id, r, err, sent, deadline)
		return err
	}
	if err := appendVia(a.client, "first"); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		c := a.client
		if g == 3 {
			c = b.client // the other instance takes the shard over now and then
		}
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_ = appendVia(c, fmt.Sprintf("g%d-%d", g, i))
				if g == 3 {
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	heal := fs.Partition(format.LogPrefix(shardName), true)
	time.Sleep(2 * commitTimeout)
	heal()
	healed := time.Now()
	// On each instance, which never restarted.
	var first time.Duration
	for name, c := range map[string]rolloutv1.RolloutServiceClient{"A": a.client, "B": b.client} {
		for i := 0; ; i++ {
			if appendVia(c, fmt.Sprintf("after-%s-%d", name, i)) == nil {
				first = max(first, time.Since(healed))
				break
			}
			if time.Since(healed) > 5*time.Second {
				t.Fatalf("instance %s still fails appends %v after the heal", name, time.Since(healed))
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	l.settle(t, a.client, shardName)
	l.verify(t, fs.Inner())
	t.Logf("first appends on A and B acked within %v of the heal; %d acked, %d NOT_COMMITTED, %d doubtful (settled)",
		first.Round(time.Millisecond), l.count(), len(l.notCommitted), len(l.doubtful))
	if first > 5*time.Second {
		t.Errorf("first appends on A and B acked %v after the heal, want within 5 s", first)
	}
}
