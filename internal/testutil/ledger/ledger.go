// Package ledger is the clients' side of the story that every suite checks
// storage against: each acknowledged record is stored exactly once, at its
// acknowledged seq, with the content sent; nothing is stored that no
// append may have landed. It reads shards straight from storage, through
// the format package, not through rolloutd's reader, so a reader bug cannot
// hide a storage bug.
//
// It imports neither internal/shard nor anything above it, so that the
// shard package's own tests can use it: callers pass the function that
// reads a shard's manifest (shard.Reader.Manifest, adapted by Manifests).
package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// ErrAckedAgain is what Acked returns for an id acknowledged before at the
// same seq: a retry that found its record present. Suites that never retry
// treat it as a failure.
var ErrAckedAgain = errors.New("acknowledged again, at the same seq")

// Key names one record.
type Key struct{ Shard, ID string }

func (k Key) String() string { return k.Shard + "/" + k.ID }

// Ack is what a client was told about one record. Hash, when not 0, is the
// content's client hash (the FooterEntry's), which the stored copy must
// carry.
type Ack struct{ Seq, Hash uint64 }

// Ledger records acknowledged records, and those that may have landed (sent,
// or answered with an unknown outcome). It is safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex
	acked   map[Key]Ack
	order   []Key                      // acked keys, in ack order
	maybe   map[Key]map[uint64]bool    // content hashes that may have landed; 0 is any
	deleted map[string]uint64          // shard → every record through this seq was deleted
	shards  map[string]map[string]bool // shard → ids, every shard named
}

// New returns an empty Ledger.
func New() *Ledger {
	return &Ledger{acked: map[Key]Ack{}, maybe: map[Key]map[uint64]bool{}, deleted: map[string]uint64{}, shards: map[string]map[string]bool{}}
}

func (l *Ledger) note(k Key) {
	if l.shards[k.Shard] == nil {
		l.shards[k.Shard] = map[string]bool{}
	}
	l.shards[k.Shard][k.ID] = true
}

// Acked records that the record was acknowledged at a.Seq. An id
// acknowledged before gets ErrAckedAgain (same seq and content) or an error
// naming both acknowledgements; the first one stays.
func (l *Ledger) Acked(shard, id string, a Ack) error {
	k := Key{shard, id}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.note(k)
	if prev, dup := l.acked[k]; dup {
		if prev.Seq != a.Seq || (prev.Hash != 0 && a.Hash != 0 && prev.Hash != a.Hash) {
			return fmt.Errorf("%s acknowledged at seq %d and again at seq %d", k, prev.Seq, a.Seq)
		}
		return fmt.Errorf("%s at seq %d: %w", k, a.Seq, ErrAckedAgain)
	}
	l.acked[k] = a
	l.order = append(l.order, k)
	return nil
}

// MayLand records that a record with content hash (0: any content) was sent
// and may be stored, once.
func (l *Ledger) MayLand(shard, id string, hash uint64) {
	k := Key{shard, id}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.note(k)
	if l.maybe[k] == nil {
		l.maybe[k] = map[uint64]bool{}
	}
	l.maybe[k][hash] = true
}

// DeletedThrough records that a delete of shard answered that every record
// through seq is gone: acknowledged records at or below it need not be
// stored, and none may be.
func (l *Ledger) DeletedThrough(shard string, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deleted[shard] = max(l.deleted[shard], seq)
}

// Len returns how many records were acknowledged.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// Get returns what the record was acknowledged with.
func (l *Ledger) Get(shard, id string) (Ack, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.acked[Key{shard, id}]
	return a, ok
}

// Pick returns an acknowledged record chosen by n (n(k) is in [0, k)), or
// false when none is.
func (l *Ledger) Pick(n func(int) int) (Key, Ack, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.order) == 0 {
		return Key{}, Ack{}, false
	}
	k := l.order[n(len(l.order))]
	return k, l.acked[k], true
}

// AckedKeys returns every acknowledged record, sorted.
func (l *Ledger) AckedKeys() []Key {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := slices.Clone(l.order)
	slices.SortFunc(out, func(a, b Key) int { return strings.Compare(a.Shard+"\x00"+a.ID, b.Shard+"\x00"+b.ID) })
	return out
}

// Shards returns every shard named to the ledger, sorted.
func (l *Ledger) Shards() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.shards))
	for s := range l.shards {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// UnexpectedError is a stored record that no append may have landed (with
// that content): never acknowledged, never sent. Suites that know more (what
// each append was told) can say more with errors.As.
type UnexpectedError struct{ Stored Stored }

func (e *UnexpectedError) Error() string {
	return fmt.Sprintf("%s: %q is stored (seq %d, in %s), but no append that may have landed carried it",
		e.Stored.Shard, e.Stored.ID, e.Stored.Seq, e.Stored.Blob)
}

// Check reads every shard named to the ledger, and extra ones, straight
// from store, and returns what they hold and every violation: Read's, and
// an acknowledged record that is not stored (unless deleted since), stored
// at another seq or with other content; a stored record that was neither
// acknowledged nor may have landed (an *UnexpectedError); a live record at
// or below a seq its shard's delete said was gone.
func (l *Ledger) Check(ctx context.Context, store blob.Store, manifest ManifestFunc, extra ...string) (map[string]*Shard, []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := make([]string, 0, len(l.shards)+len(extra))
	for s := range l.shards {
		names = append(names, s)
	}
	names = append(names, extra...)
	slices.Sort(names)
	names = slices.Compact(names)
	out := map[string]*Shard{}
	var errs []error
	found := map[Key]Stored{}
	for _, name := range names {
		sh, serrs := Read(ctx, store, name, manifest)
		errs = append(errs, serrs...)
		out[name] = sh
		for _, st := range sh.Records {
			errs = append(errs, l.checkStored(st)...)
			if _, dup := found[st.Key()]; !dup {
				found[st.Key()] = st
			}
		}
	}
	for _, k := range l.order {
		a := l.acked[k]
		st, ok := found[k]
		switch {
		case a.Seq <= l.deleted[k.Shard]:
			// its incarnation was deleted
		case !ok:
			errs = append(errs, fmt.Errorf("acknowledged %s (seq %d) is not stored", k, a.Seq))
		case st.Seq != a.Seq:
			errs = append(errs, fmt.Errorf("acknowledged %s at seq %d is stored at seq %d", k, a.Seq, st.Seq))
		case a.Hash != 0 && st.Hash != a.Hash:
			errs = append(errs, fmt.Errorf("acknowledged %s (seq %d) is stored with other content", k, a.Seq))
		}
	}
	return out, errs
}

// checkStored checks one stored record against the ledger. Callers hold
// l.mu.
func (l *Ledger) checkStored(st Stored) []error {
	var errs []error
	if d := l.deleted[st.Shard]; st.Seq <= d {
		errs = append(errs, fmt.Errorf("%s: seq %d of %q (in %s) is live, though a delete answered that it deleted every record through seq %d",
			st.Shard, st.Seq, st.ID, st.Blob, d))
	}
	k := st.Key()
	a, acked := l.acked[k]
	maybe := l.maybe[k]
	if !(acked && (a.Hash == 0 || a.Hash == st.Hash)) && !maybe[0] && !maybe[st.Hash] {
		errs = append(errs, &UnexpectedError{Stored: st})
	}
	return errs
}
