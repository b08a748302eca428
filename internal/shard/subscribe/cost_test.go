package subscribe

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// 50 subscriptions over the same 100 busy shards cause no more store
// reads per commit than 1.5 times what one causes: every shard has one
// reader in the process, whatever the number of subscribers (the
// listings each subscription's start asks for are counted apart).
func TestFanOutReadsDoNotGrowWithSubscribers(t *testing.T) {
	// Only the Notifier wakes the readers, so that every read counted is
	// caused by a commit.
	v := newEnv(t, Options{PollMin: time.Hour, PollMax: time.Hour, WatchInterval: time.Hour, IdleAfter: time.Hour})
	// The target's 100 shards take 20 s under the race detector: the
	// default run takes 20, the long one (ROLLOUTD_SUBSCRIBE_LONG=1) 100.
	shards := 20
	if os.Getenv("ROLLOUTD_SUBSCRIBE_LONG") != "" {
		shards = 100
	}
	names := make([]string, shards)
	tails := map[string]uint64{}
	for i := range names {
		names[i] = fmt.Sprintf("f/s%03d", i)
		tails[names[i]] = v.appendN(names[i], 1, true)
	}
	round := func(subs []*sub) {
		for _, n := range names {
			tails[n] = v.appendN(n, 1, true)
		}
		for _, s := range subs {
			for _, n := range names {
				s.reached(t, n, tails[n])
			}
		}
	}
	perCommit := func(subs []*sub) float64 {
		round(subs) // every subscriber rides every shard's reader
		before, _, _ := v.ops.counts(nil)
		const rounds = 5
		for range rounds {
			round(subs)
		}
		after, _, _ := v.ops.counts(nil)
		return float64(after-before) / float64(rounds*shards)
	}
	subs := []*sub{v.subscribe(Request{Prefix: "f"})}
	one := perCommit(subs)
	for range 49 {
		subs = append(subs, v.subscribe(Request{Prefix: "f"}))
	}
	many := perCommit(subs)
	t.Logf("store reads per commit: %.2f with one subscription, %.2f with %d (ratio %.2f)", one, many, len(subs), many/one)
	if many > 1.5*one {
		t.Errorf("store reads per commit grew from %.2f with one subscription to %.2f with %d", one, many, len(subs))
	}
	if n := v.e.Readers(); n != shards {
		t.Errorf("%d readers for %d shards", n, shards)
	}
}

// An idle shard costs almost nothing: once its reader has parked, the
// store ops a subscription causes for it are its share of the watcher's
// listings. Scaled to the defaults (5 s listings), the target is 0.05 ops
// per idle shard per second, so 0.25 per listing interval. A parked shard
// still delivers its next record, and a new shard its first, within about
// a listing interval, though no Notifier tells of them.
func TestIdleShardsCostAlmostNothing(t *testing.T) {
	o := Options{PollMin: time.Millisecond, PollMax: 10 * time.Millisecond, WatchInterval: 50 * time.Millisecond, IdleAfter: 100 * time.Millisecond}
	v := newEnv(t, o)
	const shards, active = 200, 10
	tails := map[string]uint64{}
	name := func(i int) string { return fmt.Sprintf("i/s%03d", i) }
	for i := range shards {
		tails[name(i)] = v.appendN(name(i), 1, false)
	}
	v.closeWriters()
	// Idle means no commit for IdleAfter: a shard committed to more
	// recently is active, and its reader polls it from the start.
	time.Sleep(o.IdleAfter)
	idle := func(s string) bool { return s >= name(active) && strings.HasPrefix(s, "i/s") }
	s := v.subscribe(Request{Prefix: "i"})
	for n, tail := range tails {
		s.reached(t, n, tail)
	}
	// Starting costs each idle shard a read up to its tail and its
	// reader's first read, not IdleAfter of polling.
	deadline := time.Now().Add(20 * time.Second)
	for v.e.Parked() < shards {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d readers parked", v.e.Parked(), shards)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, _, started := v.ops.counts(idle)
	t.Logf("starting cost %.1f reads per idle shard", float64(started)/(shards-active))
	if perShard := float64(started) / (shards - active); perShard > 10 {
		t.Errorf("starting cost %.1f reads per idle shard, want a read up to the tail and one more (at most 10)", perShard)
	}
	// The active shards' writers are another instance's: their readers
	// poll, woken also by the listings.
	stop := make(chan struct{})
	var appender sync.WaitGroup
	appender.Go(func() {
		for {
			for i := range active {
				v.appendN(name(i), 1, false)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		appender.Wait()
	}()
	deadline = time.Now().Add(20 * time.Second)
	for v.e.Parked() < shards-active {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d idle shards' readers parked", v.e.Parked(), shards-active)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, lists0, idle0 := v.ops.counts(idle)
	pages0 := v.e.ListPages()
	const window = time.Second
	time.Sleep(window)
	_, lists1, idle1 := v.ops.counts(idle)
	intervals := float64(window) / float64(o.WatchInterval)
	listShare := float64(lists1-lists0) * (shards - active) / shards
	perShard := (float64(idle1-idle0) + listShare) / (shards - active) / intervals
	t.Logf("idle shards: %d reads and %d listings (%d pages) in %d intervals: %.4f ops per idle shard per interval (%.4f/s at the 5 s default); target 0.25",
		idle1-idle0, lists1-lists0, v.e.ListPages()-pages0, int(intervals), perShard, perShard/5)
	if perShard > 0.25 {
		t.Errorf("an idle shard costs %.3f store ops per listing interval, want at most 0.25", perShard)
	}
	close(stop)
	appender.Wait()

	// A parked shard's next record, and a new shard's first.
	start := time.Now()
	woken := v.appendN(name(shards-1), 1, false)
	created := v.appendN("i/new", 1, false)
	s.reached(t, name(shards-1), woken)
	s.reached(t, "i/new", created)
	if d := time.Since(start); d > 20*o.WatchInterval {
		t.Errorf("a parked shard's record and a new shard's took %s, want about a listing interval (%s)", d, o.WatchInterval)
	}
	s.stop(t)
}

// A commit of a writer in this process reaches the subscription at once:
// the Notifier wakes the shard's reader, parked or not, with no polling
// and no listing (both are an hour here).
func TestLocalCommitWakesTheReader(t *testing.T) {
	v := newEnv(t, Options{PollMin: time.Hour, PollMax: time.Hour, WatchInterval: time.Hour, IdleAfter: 50 * time.Millisecond})
	tail := v.appendN("w/a", 1, true)
	s := v.subscribe(Request{Prefix: "w"})
	s.reached(t, "w/a", tail)
	var took []time.Duration
	for i := range 10 {
		if i == 5 {
			// Parked from here on: idle longer than IdleAfter.
			for v.e.Parked() != 1 {
				time.Sleep(5 * time.Millisecond)
			}
		}
		start := time.Now()
		tail = v.appendN("w/a", 1, true)
		s.reached(t, "w/a", tail)
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("commit to delivery, local writer: p50 %s, max %s", took[len(took)/2], took[len(took)-1])
	if p50 := took[len(took)/2]; p50 > 100*time.Millisecond {
		t.Errorf("commit to delivery p50 %s, want at most 100 ms", p50)
	}
}
