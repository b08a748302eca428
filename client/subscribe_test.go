package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// reader reads a subscription in a goroutine of its own, which stops when
// the test ends.
type reader struct {
	sub     *client.Subscription
	batches chan *client.SubscribeBatch
	ended   chan error
	seen    map[string][]uint64 // shard -> seqs, in the order yielded
	deleted []string
}

func read(t *testing.T, sub *client.Subscription) *reader {
	t.Helper()
	r := &reader{sub: sub, batches: make(chan *client.SubscribeBatch, 1000), ended: make(chan error, 1), seen: map[string][]uint64{}}
	go func() {
		for b, err := range sub.Batches() {
			if err != nil {
				r.ended <- err
				return
			}
			r.batches <- b
		}
		r.ended <- nil
	}()
	t.Cleanup(func() {
		sub.Close()
		<-r.ended
	})
	return r
}

func (r *reader) count() int {
	n := 0
	for _, s := range r.seen {
		n += len(s)
	}
	return n
}

func (r *reader) take(b *client.SubscribeBatch) {
	for _, rec := range b.Records {
		r.seen[b.Shard] = append(r.seen[b.Shard], rec.GetSeq())
	}
	if b.Deleted {
		r.deleted = append(r.deleted, b.Shard)
	}
}

// await takes batches until n records in all were yielded, and fails the
// test if the subscription ends first, or after d.
func (r *reader) await(t *testing.T, n int, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for r.count() < n {
		select {
		case b := <-r.batches:
			r.take(b)
		case err := <-r.ended:
			r.ended <- err
			t.Fatalf("the subscription ended after %d records (%v): %v", r.count(), r.seen, err)
		case <-timeout:
			t.Fatalf("after %v the subscription yielded %d records (%v), want %d", d, r.count(), r.seen, n)
		}
	}
}

// quiet takes what arrives within d: nothing, when all was yielded.
func (r *reader) quiet(d time.Duration) {
	timeout := time.After(d)
	for {
		select {
		case b := <-r.batches:
			r.take(b)
		case <-timeout:
			return
		}
	}
}

// check fails the test unless the subscription yielded seqs 1..want[shard]
// of each shard once each, in order, and nothing else.
func (r *reader) check(t *testing.T, want map[string]int) {
	t.Helper()
	for shard, n := range want {
		got := r.seen[shard]
		ok := len(got) == n
		for i := 0; ok && i < n; i++ {
			ok = got[i] == uint64(i+1)
		}
		if !ok {
			t.Errorf("shard %s: yielded seqs %v, want 1..%d once each, in order", shard, got, n)
		}
	}
	for shard := range r.seen {
		if _, ok := want[shard]; !ok {
			t.Errorf("shard %s, not under the prefix or not this member's, was yielded: %v", shard, r.seen[shard])
		}
	}
}

func appendTo(t *testing.T, ctx context.Context, c *client.Client, shard string, n int) {
	t.Helper()
	for i := range n {
		if _, err := c.Append(ctx, shard, []*rolloutv1.Record{{Content: fmt.Sprint(i)}}); err != nil {
			t.Fatalf("append to %s: %v", shard, err)
		}
	}
}

// A subscription over a prefix delivers the shards that exist and those
// created while it runs, each in seq order, and nothing of a shard outside
// the prefix ("sub-x" and "subx" are not under "sub"). Two members split
// the shards between them, each shard to one.
func TestSubscribeFollowsThePrefixAndNewShards(t *testing.T) {
	srv := startServer(t, watchFast...)
	c := newClient(t, srv.GRPCAddr)
	ctx := ctxFor(t, 60*time.Second)
	appendTo(t, ctx, c, "sub/a", 3)
	appendTo(t, ctx, c, "subx/outside", 2)

	r := read(t, mustSubscribe(t, c, ctx, "sub", client.SubscribeOptions{Start: client.StartEarliest}))
	r.await(t, 3, 10*time.Second)
	appendTo(t, ctx, c, "sub/b/actor-1", 2)
	appendTo(t, ctx, c, "sub/a", 2)
	appendTo(t, ctx, c, "sub-x/outside", 1)
	appendTo(t, ctx, c, "sub/c", 4)
	r.await(t, 11, 20*time.Second)
	r.quiet(300 * time.Millisecond)
	want := map[string]int{"sub/a": 5, "sub/b/actor-1": 2, "sub/c": 4}
	r.check(t, want)

	var members []*reader
	for i := range 2 {
		members = append(members, read(t, mustSubscribe(t, c, ctx, "sub", client.SubscribeOptions{Start: client.StartEarliest, Member: i, Members: 2})))
	}
	total := 0
	for total < 11 {
		select {
		case b := <-members[0].batches:
			members[0].take(b)
		case b := <-members[1].batches:
			members[1].take(b)
		case <-time.After(10 * time.Second):
			t.Fatalf("two members yielded %v and %v, want the 11 records between them", members[0].seen, members[1].seen)
		}
		total = members[0].count() + members[1].count()
	}
	for shard := range want {
		_, in0 := members[0].seen[shard]
		_, in1 := members[1].seen[shard]
		if in0 == in1 {
			t.Errorf("shard %s: member 0 read it %v, member 1 %v; want exactly one", shard, in0, in1)
		}
	}
}

// watchFast has the server list subscribed prefixes every 100 ms rather
// than 5 s, so that new shards are found within the tests' patience.
var watchFast = []string{"--subscribe-watch-interval", "100ms"}

func mustSubscribe(t *testing.T, c *client.Client, ctx context.Context, prefix string, opts client.SubscribeOptions) *client.Subscription {
	t.Helper()
	sub, err := c.Subscribe(ctx, prefix, opts)
	if err != nil {
		t.Fatalf("Subscribe(%q, %+v): %v", prefix, opts, err)
	}
	return sub
}

// A subscription keeps going across a server restart: SIGTERM ends its
// stream (SCAN_INTERRUPTED), the server restarts on the same store and
// port, and the subscription resumes from the cursors it received. It
// yields every record exactly once, in order, those appended while it was
// disconnected and a shard created then included.
func TestSubscribeResumesAcrossARestart(t *testing.T) {
	addr := freeAddr(t)
	srv := startServer(t, append(watchFast, "--listen", addr)...)
	c := newClient(t, addr)
	ctx := ctxFor(t, 60*time.Second)
	appendTo(t, ctx, c, "restart/a", 5)
	appendTo(t, ctx, c, "restart/b", 2)

	r := read(t, mustSubscribe(t, c, ctx, "restart", client.SubscribeOptions{}))
	r.await(t, 7, 10*time.Second)
	appendTo(t, ctx, c, "restart/a", 3)
	r.await(t, 10, 10*time.Second)

	srv.shutdown(t, 10*time.Second) // as SIGTERM does
	srv = startOn(t, srv.dir, append(watchFast, "--listen", addr)...)
	serving := time.Now()
	appendTo(t, ctx, c, "restart/a", 2)
	appended := time.Since(serving)
	r.await(t, 12, 20*time.Second)
	t.Logf("the restarted server acked the first appends %v after it listened; the subscription had yielded them %v after", appended, time.Since(serving))
	appendTo(t, ctx, c, "restart/c", 3)
	appendTo(t, ctx, c, "restart/b", 1)
	r.await(t, 16, 20*time.Second)
	r.quiet(300 * time.Millisecond)
	r.check(t, map[string]int{"restart/a": 10, "restart/b": 3, "restart/c": 3})
	if got := fmt.Sprint(r.sub.Positions()); got != "map[restart/a:10 restart/b:3 restart/c:3]" {
		t.Errorf("Positions %s after everything was yielded", got)
	}
}

// A connection cut while the stream carries a batch (a reset connection,
// not a shutdown) is resumed from the cursors received: the batch it cut
// comes on the new stream, once.
func TestSubscribeResumesAcrossACutConnection(t *testing.T) {
	srv := startServer(t, watchFast...)
	p := startCutProxy(t, srv.GRPCAddr)
	c := newClient(t, p.Addr())
	direct := newClient(t, srv.GRPCAddr)
	ctx := ctxFor(t, 60*time.Second)
	appendTo(t, ctx, direct, "cut/a", 3)

	r := read(t, mustSubscribe(t, c, ctx, "cut", client.SubscribeOptions{}))
	r.await(t, 3, 10*time.Second)
	p.armed.Store(true)
	appendTo(t, ctx, direct, "cut/a", 2)
	r.await(t, 5, 20*time.Second)
	appendTo(t, ctx, direct, "cut/b", 1)
	r.await(t, 6, 10*time.Second)
	r.quiet(300 * time.Millisecond)
	if p.cuts.Load() != 1 {
		t.Fatalf("the proxy cut %d connections, want 1", p.cuts.Load())
	}
	r.check(t, map[string]int{"cut/a": 5, "cut/b": 1})
}

// A consumer's committed positions are where a new subscription with it
// starts; describe and list show it; a reset refuses the commits of the
// subscriptions that read the old generation and ends them
// (ErrConsumerReset), and a delete forgets it.
func TestSubscribeConsumerCommitResetDelete(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.GRPCAddr)
	ctx := ctxFor(t, 60*time.Second)
	appendTo(t, ctx, c, "team/a", 4)
	appendTo(t, ctx, c, "team/b", 2)

	first := mustSubscribe(t, c, ctx, "team", client.SubscribeOptions{Consumer: "trainer"})
	r := read(t, first)
	r.await(t, 6, 10*time.Second)
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	gen := first.ConsumerGeneration()
	if gen == 0 {
		t.Errorf("ConsumerGeneration 0 after the commit that created the consumer")
	}
	info, err := c.DescribeConsumer(ctx, "team", "trainer", true)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(info.GetPositions()); got != "map[team/a:4 team/b:2]" || info.GetGeneration() != gen {
		t.Errorf("DescribeConsumer: positions %s generation %d, want map[team/a:4 team/b:2], %d", got, info.GetGeneration(), gen)
	}
	var listed []string
	for ci, err := range c.AllConsumers(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, ci.GetPrefix()+"/"+ci.GetConsumer())
	}
	page, err := c.ListConsumers(ctx, &rolloutv1.ListConsumersRequest{Prefix: "team", PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(listed, []string{"team/trainer"}) || len(page.GetConsumers()) != 1 {
		t.Errorf("AllConsumers: %v, ListConsumers: %v; want team/trainer in both", listed, page)
	}

	// Records after the commit, then a second subscription with the
	// consumer: it starts after the committed cursors.
	appendTo(t, ctx, c, "team/a", 2)
	r.await(t, 8, 10*time.Second)
	second := read(t, mustSubscribe(t, c, ctx, "team", client.SubscribeOptions{Consumer: "trainer"}))
	second.await(t, 2, 10*time.Second)
	second.quiet(300 * time.Millisecond)
	if got := fmt.Sprint(second.seen); got != "map[team/a:[5 6]]" {
		t.Errorf("a subscription with the consumer yielded %s, want map[team/a:[5 6]]: after the commit", got)
	}
	if g := second.sub.ConsumerGeneration(); g != gen {
		t.Errorf("the second subscription reads generation %d, want %d", g, gen)
	}

	reset, err := c.ResetConsumer(ctx, "team", "trainer", client.StartEarliest, nil)
	if err != nil {
		t.Fatal(err)
	}
	if reset.GetGeneration() <= gen || len(reset.GetPositions()) != 0 {
		t.Errorf("ResetConsumer to earliest: %v, want a generation above %d and no positions", reset, gen)
	}
	if err := second.sub.Commit(ctx); !errors.Is(err, client.ErrConsumerReset) {
		t.Errorf("Commit after a reset: %v, want ErrConsumerReset", err)
	}
	select {
	case err := <-second.ended:
		if !errors.Is(err, client.ErrConsumerReset) {
			t.Errorf("the subscription whose commit was refused ended with %v, want ErrConsumerReset", err)
		}
		second.ended <- err
	case <-time.After(10 * time.Second):
		t.Errorf("the subscription whose commit was refused goes on")
	}
	third := read(t, mustSubscribe(t, c, ctx, "team", client.SubscribeOptions{Consumer: "trainer"}))
	third.await(t, 8, 10*time.Second)
	third.check(t, map[string]int{"team/a": 6, "team/b": 2})

	if err := c.DeleteConsumer(ctx, "team", "trainer"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DescribeConsumer(ctx, "team", "trainer", false); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("DescribeConsumer after DeleteConsumer: %v, want ErrNotFound", err)
	}
	if _, err := c.Subscribe(ctx, "team", client.SubscribeOptions{Start: client.StartConsumer, Consumer: "trainer"}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Subscribe from a deleted consumer: %v, want ErrNotFound", err)
	}
}

// StartLatest yields only what is committed after Subscribe returned,
// and a deleted shard is reported; its name, written again, continues.
func TestSubscribeLatestAndDeletedShards(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.GRPCAddr)
	ctx := ctxFor(t, 60*time.Second)
	appendTo(t, ctx, c, "late/a", 3)
	r := read(t, mustSubscribe(t, c, ctx, "late", client.SubscribeOptions{Start: client.StartLatest}))
	appendTo(t, ctx, c, "late/a", 1)
	r.await(t, 1, 10*time.Second)
	if got := fmt.Sprint(r.seen); got != "map[late/a:[4]]" {
		t.Fatalf("StartLatest yielded %s, want map[late/a:[4]]", got)
	}
	if _, err := c.DeleteShard(ctx, "late/a", nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(20 * time.Second)
	for len(r.deleted) == 0 {
		select {
		case b := <-r.batches:
			r.take(b)
		case <-deadline:
			t.Fatalf("the deleted shard was not reported; yielded %v", r.seen)
		}
	}
	appendTo(t, ctx, c, "late/a", 1)
	r.await(t, 2, 10*time.Second)
	if got := r.seen["late/a"]; len(got) != 2 || got[1] <= 4 {
		t.Errorf("late/a yielded seqs %v, want 4 and then one above it after the delete", got)
	}
}

// With affinity the ring needs a shard to hash; Subscribe names none and
// reaches a server all the same.
func TestSubscribeWithAffinity(t *testing.T) {
	srv := startServer(t)
	c, _ := dialAffine(t, endpoints(srv.GRPCAddr))
	ctx := ctxFor(t, 30*time.Second)
	appendTo(t, ctx, c, "aff/a", 2)
	r := read(t, mustSubscribe(t, c, ctx, "aff", client.SubscribeOptions{}))
	r.await(t, 2, 10*time.Second)
	r.check(t, map[string]int{"aff/a": 2})
}

// Close stops the subscription's goroutine (goleak checks the package),
// Batches yields nothing after it, and the subscription's context ending
// ends Batches with that error, as Scan's does.
func TestSubscriptionEnds(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.GRPCAddr)
	ctx := ctxFor(t, 30*time.Second)
	appendTo(t, ctx, c, "end/a", 2)

	sub := mustSubscribe(t, c, ctx, "end", client.SubscribeOptions{})
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	for b, err := range sub.Batches() {
		t.Errorf("after Close, Batches yielded %v, %v", b, err)
	}
	if err := sub.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	// Closed while Batches waits: it ends, yielding nothing.
	sub = mustSubscribe(t, c, ctx, "end-none", client.SubscribeOptions{})
	yielded := make(chan string, 10)
	go func() {
		for b, err := range sub.Batches() {
			yielded <- fmt.Sprint(b, err)
		}
		close(yielded)
	}()
	time.Sleep(50 * time.Millisecond)
	sub.Close()
	for y := range yielded {
		t.Errorf("closed while Batches waited, it yielded %s", y)
	}

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub = mustSubscribe(t, c, sctx, "end", client.SubscribeOptions{})
	defer sub.Close()
	n := 0
	var ended error
	for b, err := range sub.Batches() {
		if err != nil {
			ended = err
			break
		}
		n += len(b.Records)
		if n == 2 {
			cancel()
		}
	}
	if !errors.Is(ended, context.Canceled) || n != 2 {
		t.Errorf("after %d records, Batches ended with %v, want context.Canceled after 2", n, ended)
	}
	if err := sub.Commit(ctx); err == nil || errors.Is(err, client.ErrConsumerReset) {
		t.Errorf("Commit without a consumer: %v, want an error saying so", err)
	}
}

// A LATEST subscription with a consumer commits where it started each
// shard, before any of them sent a record: the consumer then resumes
// each shard there, not from its first record.
func TestSubscribeLatestCommitsItsStarts(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.GRPCAddr)
	ctx := ctxFor(t, 60*time.Second)
	appendTo(t, ctx, c, "starts/a", 3)
	sub := mustSubscribe(t, c, ctx, "starts", client.SubscribeOptions{Start: client.StartLatest, Consumer: "trainer"})
	if err := sub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := c.DescribeConsumer(ctx, "starts", "trainer", true)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(info.GetPositions()); got != "map[starts/a:3]" {
		t.Errorf("the consumer stored %s, want map[starts/a:3]", got)
	}
}
