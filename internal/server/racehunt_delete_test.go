package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// The race hunter's delete scenario (family delete, finding 3).

// huntIncarnation is what the store holds of the delete shard.
type huntIncarnation struct {
	incarnation uint64
	tombstone   bool
	lastSeq     uint64
}

// incarnationOf reads the shard's state straight from the fault-free
// store.
func (h *hunter) incarnationOf(ctx context.Context, s string) (huntIncarnation, error) {
	data, _, err := h.inner.Get(ctx, format.ManifestName(s), blob.GetOptions{})
	if err != nil {
		return huntIncarnation{}, err
	}
	m, err := format.DecodeManifest(data)
	if err != nil {
		return huntIncarnation{}, err
	}
	inc := huntIncarnation{incarnation: m.GetIncarnation(), tombstone: m.GetTombstone() != nil}
	if !inc.tombstone {
		view, err := shard.NewReader(h.inner, shard.ReaderOptions{}).Manifest(ctx, s)
		if err != nil {
			return huntIncarnation{}, err
		}
		inc.lastSeq = view.GetNextSeq() - 1
	}
	return inc, nil
}

// deleteRace appends to the delete shard through both instances, pauses,
// and deletes it with expected_last_seq (usually the true last seq, now
// and then one below) through one instance's DeleteShard. Usually the
// tombstone CAS's answer is lost and the deleter's re-read after it is
// slow, and the appends resume as the tombstone lands: the writer set
// replaces the writer the delete fenced, and the replacement claims the
// next incarnation and commits before the deleter looks. The answer must
// match the store: "nothing deleted" (SEQ_MISMATCH) only if the
// incarnation is still there, "deleted" only if it is gone.
func (h *hunter) deleteRace() {
	s := huntDeleteShard
	svc := h.instance(h.rng.intN(2))
	v := h.viewsOf(svc)
	if v == nil {
		return
	}
	traffic := h.pausableAppenders(s, 3)
	defer traffic.stop()
	time.Sleep(h.rng.between(30*time.Millisecond, 120*time.Millisecond))
	// Let the appends in flight be answered, so that expected_last_seq
	// is usually the true last seq (a commit may still land after its
	// caller gave up: then the delete is refused, as it should be).
	traffic.pause()
	time.Sleep(h.rng.between(2*time.Millisecond, 10*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	before, err := h.incarnationOf(ctx, s)
	if err != nil || before.tombstone {
		traffic.resume()
		return
	}
	expected := before.lastSeq
	if h.rng.chance(0.15) && expected > 0 {
		expected--
	}
	if h.rng.chance(0.7) {
		defer h.loseTombstoneAnswer(v.deletes, s, traffic.resume)()
	} else {
		h.work.Go(func() { time.Sleep(h.rng.between(0, 30*time.Millisecond)); traffic.resume() })
	}
	resp, err := svc.DeleteShard(ctx, &rolloutv1.DeleteShardRequest{Shard: s, ExpectedLastSeq: &expected})
	traffic.resume()
	h.checkDeletion(s, before, expected, resp, err)
}

// checkDeletion holds a DeleteShard's answer against what the fault-free
// store holds now, and tells the ledger what was deleted.
func (h *hunter) checkDeletion(s string, before huntIncarnation, expected uint64, resp *rolloutv1.DeleteShardResponse, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	after, aerr := h.incarnationOf(ctx, s)
	if aerr != nil {
		h.t.Errorf("read the delete shard from the fault-free store: %v", aerr)
		return
	}
	gone := after.incarnation != before.incarnation
	switch {
	case err == nil && resp.GetAlreadyDeleted():
		h.violate(famDelete, "DeleteShard of %s answered already deleted; incarnation %d was live (last seq %d) when it began", s, before.incarnation, before.lastSeq)
	case err == nil:
		h.count("deleted")
		h.l.deletedThrough(s, resp.GetLastSeq())
		if !gone {
			h.violate(famDelete, "DeleteShard of %s answered deleted (incarnation %d, last seq %d), but incarnation %d is still there", s, resp.GetIncarnation(), resp.GetLastSeq(), before.incarnation)
		}
		if resp.GetLastSeq() != expected {
			h.violate(famDelete, "DeleteShard of %s with expected_last_seq %d deleted through seq %d", s, expected, resp.GetLastSeq())
		}
	case status.Code(err) == codes.FailedPrecondition:
		h.count("delete-mismatch")
		if gone {
			h.l.deletedThrough(s, expected) // a tombstone lands only on a match
			h.violate(famDelete, "DeleteShard of %s with expected_last_seq %d answered that nothing was deleted (%v), but incarnation %d (last seq %d) is gone: the store holds incarnation %d",
				s, expected, err, before.incarnation, before.lastSeq, after.incarnation)
		}
	default:
		h.count("delete-" + status.Code(err).String())
		if gone {
			h.l.deletedThrough(s, expected) // an unclear answer; the tombstone landed
		}
	}
}

// huntPausable are appenders of fresh ids to one shard, through either
// instance, that can be paused until every append in flight is answered.
type huntPausable struct {
	paused   atomic.Bool
	inFlight atomic.Int32
	done     chan struct{}
	wg       sync.WaitGroup
}

func (h *hunter) pausableAppenders(s string, n int) *huntPausable {
	p := &huntPausable{done: make(chan struct{})}
	for range n {
		p.wg.Go(func() {
			for !huntClosed(p.done) {
				p.inFlight.Add(1)
				if p.paused.Load() {
					p.inFlight.Add(-1)
					time.Sleep(time.Millisecond)
					continue
				}
				es := h.entries(s, 3, idMix{})
				ctx, cancel := context.WithTimeout(context.Background(), h.rng.between(50*time.Millisecond, 400*time.Millisecond))
				rs, err := huntAppend(ctx, h.instance(h.rng.intN(2)), s, es)
				cancel()
				h.answered(s, es, rs, err)
				p.inFlight.Add(-1)
				if err != nil {
					time.Sleep(h.rng.between(time.Millisecond, 5*time.Millisecond))
				}
			}
		})
	}
	return p
}

// pause stops new appends and waits (up to a second) for those in flight.
func (p *huntPausable) pause() {
	p.paused.Store(true)
	huntWaitFor(time.Second, func() bool { return p.inFlight.Load() == 0 })
}

func (p *huntPausable) resume() { p.paused.Store(false) }

func (p *huntPausable) stop() {
	close(p.done)
	p.wg.Wait()
}

// loseTombstoneAnswer arms the deleter's view: its second manifest CAS
// (the tombstone, after the claim) lands but its answer is lost; then
// landed runs, and the deleter's next manifest read is slowed. It returns
// a function that disarms it.
func (h *hunter) loseTombstoneAnswer(view *faultstore.Store, s string, landed func()) (disarm func()) {
	h.count("delete-lost-answer")
	manifest := format.ManifestName(s)
	slow := h.rng.between(30*time.Millisecond, 150*time.Millisecond)
	lose := view.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpPut}, Prefix: manifest, Fault: faultstore.LoseResponse, Skip: 1, Count: 1})
	var removeSlow atomic.Pointer[func()]
	view.SetHooks(faultstore.Hooks{After: func(c faultstore.Call) {
		if c.Op != faultstore.OpPut || c.Name != manifest || c.Fault != faultstore.LoseResponse {
			return
		}
		r := view.Add(faultstore.Rule{Ops: []faultstore.Op{faultstore.OpGet}, Prefix: manifest, Fault: faultstore.Delay, Count: 1, Delay: slow})
		removeSlow.Store(&r)
		landed()
	}})
	return func() {
		view.SetHooks(faultstore.Hooks{})
		lose()
		if r := removeSlow.Load(); r != nil {
			(*r)()
		}
	}
}
