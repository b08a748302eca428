package subscribe

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// watcher lists one prefix every WatchInterval, flat, all pages, for every
// subscription of the prefix in the process. It finds the shards created
// since (the subscriptions add them) and the shards that changed (their
// parked readers are woken): so an idle shard costs its share of a few
// List calls per interval, whatever the number of shards or subscribers.
//
// A shard's signature is its manifest's ETag and the name of the highest
// log position listed. A commit creates a log position above every one
// before it; a checkpoint, a delete and a re-create rewrite the manifest;
// so no change to a shard's records leaves its signature as it was. (GC
// deleting positions changes it too: a wake that finds nothing costs a
// read and parks the reader again.)
type watcher struct {
	e      *Engine
	prefix string
	root   string             // what is listed: "shards/<prefix>/", or "shards/"
	refs   int                // subscriptions holding it; guarded by e.mu
	cancel context.CancelFunc // stops run
	done   chan struct{}      // closed when run has returned
	kick   chan struct{}      // (capacity 1) list now

	mu   sync.Mutex
	sigs map[string]signature // the shards of the last listing that succeeded
	subs map[*subscription]struct{}
	// begun and finished count the listings; finishedCh is closed (and
	// replaced) as each finishes, with err its error.
	begun, finished uint64
	err             error
	finishedCh      chan struct{}
}

// signature is what a listing shows of one shard.
type signature struct {
	manifest blob.ETag
	log      string // the highest log position's name
}

func newWatcher(e *Engine, prefix string) *watcher {
	root := format.ShardsRoot
	if prefix != "" {
		root = format.ShardPrefix(prefix)
	}
	return &watcher{e: e, prefix: prefix, root: root, done: make(chan struct{}), kick: make(chan struct{}, 1),
		subs: map[*subscription]struct{}{}, finishedCh: make(chan struct{})}
}

// run lists the prefix now and then every interval, or sooner when
// kicked, until ctx ends.
func (w *watcher) run(ctx context.Context) {
	timer := time.NewTimer(w.e.opts.WatchInterval)
	defer timer.Stop()
	for {
		w.list(ctx)
		timer.Reset(w.e.opts.WatchInterval)
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
			timer.Stop()
		case <-timer.C:
		}
	}
}

// join waits for a listing that begins after the call, then registers sub
// for the shards later listings find, and returns that listing's shards:
// every shard that had a blob when join was called is among them, and
// every shard created later is either among them or passed to sub.add.
func (w *watcher) join(ctx context.Context, sub *subscription) ([]string, error) {
	w.mu.Lock()
	want := w.begun + 1
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.finished < want {
		ch := w.finishedCh
		w.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			w.mu.Lock()
			return nil, ctx.Err()
		case <-w.done:
			w.mu.Lock()
			return nil, ErrClosed
		}
		w.mu.Lock()
	}
	if w.err != nil {
		return nil, w.err
	}
	w.subs[sub] = struct{}{}
	shards := make([]string, 0, len(w.sigs))
	for s := range w.sigs {
		shards = append(shards, s)
	}
	return shards, nil
}

// leave unregisters sub.
func (w *watcher) leave(sub *subscription) {
	w.mu.Lock()
	delete(w.subs, sub)
	w.mu.Unlock()
}

// list lists the prefix once: new shards go to the subscriptions, changed
// ones have their readers woken. A failed listing changes nothing; the
// next one tries again.
func (w *watcher) list(ctx context.Context) {
	w.mu.Lock()
	w.begun++
	w.mu.Unlock()
	sigs, err := w.listSignatures(ctx)
	var fresh, changed []string
	var subs []*subscription
	w.mu.Lock()
	if err == nil {
		for s, sig := range sigs {
			old, ok := w.sigs[s]
			switch {
			case !ok:
				fresh = append(fresh, s)
			case old != sig:
				changed = append(changed, s)
			}
		}
		w.sigs = sigs
		for sub := range w.subs {
			subs = append(subs, sub)
		}
	} else if ctx.Err() == nil {
		w.e.log.Warn("subscription watcher: listing the prefix failed; the next listing tries again", zap.String("prefix", w.prefix), zap.Error(err))
	}
	w.finished++
	w.err = err
	close(w.finishedCh)
	w.finishedCh = make(chan struct{})
	w.mu.Unlock()
	for _, s := range changed {
		w.e.set.Wake(s)
	}
	for _, sub := range subs {
		for _, s := range fresh {
			sub.add(s)
		}
	}
}

// listSignatures lists every blob under the prefix and returns each
// shard's signature. A shard's name is what lies between "shards/" and the
// first "/_" of its blobs' names (a shard segment never starts with '_').
func (w *watcher) listSignatures(ctx context.Context) (map[string]signature, error) {
	sigs := map[string]signature{}
	tok := ""
	for {
		page, err := w.e.store.List(ctx, blob.ListOptions{Prefix: w.root, Token: tok, Max: listPageMax})
		w.e.listPages.Add(1)
		if err != nil {
			return nil, fmt.Errorf("list shards under %q: %w", w.prefix, err)
		}
		for _, it := range page.Items {
			rest := strings.TrimPrefix(it.Name, format.ShardsRoot)
			i := strings.Index(rest, "/_")
			if i <= 0 {
				continue
			}
			name, own := rest[:i], rest[i+1:]
			sig := sigs[name]
			switch {
			case own == "_manifest":
				sig.manifest = it.ETag
			case strings.HasPrefix(own, "_l/") && own > sig.log:
				sig.log = own
			}
			sigs[name] = sig
		}
		if page.Next == "" {
			return sigs, nil
		}
		tok = page.Next
	}
}

// listPageMax is the page size asked for: Azure's largest.
const listPageMax = 5000
