package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// This file holds the race hunter's ledger: what every caller was told, and
// the check of those answers against what the store holds at the end. See
// TestRaceHunter for the invariants.

// huntOutcome is what an Append's answer says about its records.
type huntOutcome int

const (
	// huntAcked: committed, each record at its result's seq.
	huntAcked huntOutcome = iota
	// huntMaybe: may have landed (ErrOutcomeUnknown, or a handler panic,
	// after which the caller knows nothing).
	huntMaybe
	// huntNotCommitted: certainly not committed: fenced, aborted, closed,
	// backpressure, shutting down, cancelled before it was sent, a storage
	// error, and ErrIDConflict (the append failed as a whole).
	huntNotCommitted
)

// classifyAppend sorts an Append's error by what it tells the caller.
// ErrOutcomeUnknown, from the shard or straight from storage, and a context
// error wrapped with it, mean "may have landed"; every other error claims
// that nothing of the append was committed.
func classifyAppend(err error) huntOutcome {
	var pe *huntPanic
	switch {
	case err == nil:
		return huntAcked
	case errors.As(err, &pe), errors.Is(err, shard.ErrOutcomeUnknown), errors.Is(err, blob.ErrOutcomeUnknown):
		return huntMaybe
	default:
		return huntNotCommitted
	}
}

// huntPanic is a panic recovered on an appender's goroutine: the gRPC
// interceptor would turn it into Internal.
type huntPanic struct {
	value any
	stack string
}

func (p *huntPanic) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// huntKey names one record id of one shard.
type huntKey struct{ shard, id string }

// huntVariant is one content of one id (conflict ids have two), as every
// Append that carried it was answered.
type huntVariant struct {
	appends int  // answered appends that carried it
	mayLand bool // one of them was acked or may have landed
	acked   bool
	seq     uint64   // the acked seq
	told    []string // the first few "not committed" answers, for reports
}

// huntLedger is the clients' side of the story. A record (id and content)
// may be stored only if some Append that carried it was acknowledged or
// told "may have landed"; it must be stored, once, at its seq, if one was
// acknowledged.
type huntLedger struct {
	mu       sync.Mutex
	records  map[huntKey]map[uint64]*huntVariant // by client hash
	outcomes [3]int
	errs     map[string]int // not-committed answers, by error class
	// deleted: per shard, the last seq of the newest incarnation a delete
	// removed. Seqs go on across incarnations, so every record at or below
	// it is gone, and every record above it is the live incarnation's.
	deleted map[string]uint64
	v       *huntViolations
}

func newHuntLedger(v *huntViolations) *huntLedger {
	return &huntLedger{records: map[huntKey]map[uint64]*huntVariant{}, errs: map[string]int{}, deleted: map[string]uint64{}, v: v}
}

// deletedThrough records that the shard's records at or below lastSeq were
// deleted.
func (l *huntLedger) deletedThrough(shardName string, lastSeq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deleted[shardName] = max(l.deleted[shardName], lastSeq)
}

// isConflictID reports whether the harness ever appends id with two
// contents. Only these ids may legitimately get ErrIDConflict.
func isConflictID(id string) bool { return strings.HasPrefix(id, "k") }

// answered records an Append of entries to shardName and its answer.
func (l *huntLedger) answered(shardName string, entries []shard.Entry, results []shard.Result, err error) {
	out := classifyAppend(err)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.outcomes[out]++
	if out == huntNotCommitted {
		l.errs[errClass(err)]++
	}
	if errors.Is(err, shard.ErrIDConflict) && !slices.ContainsFunc(entries, func(e shard.Entry) bool { return isConflictID(e.ID) }) {
		l.v.add("ALREADY_EXISTS for an append whose ids %v are never sent with other content: %v", entryIDs(entries), err)
	}
	if out == huntAcked && len(results) != len(entries) {
		l.v.add("append of %v acked with %d results", entryIDs(entries), len(results))
		out = huntMaybe
	}
	for i, e := range entries {
		k := huntKey{shardName, e.ID}
		byHash := l.records[k]
		if byHash == nil {
			byHash = map[uint64]*huntVariant{}
			l.records[k] = byHash
		}
		v := byHash[e.ClientHash]
		if v == nil {
			v = &huntVariant{}
			byHash[e.ClientHash] = v
		}
		v.appends++
		switch out {
		case huntAcked:
			r := results[i]
			if r.ID != e.ID {
				l.v.add("%s: result %d of an append is for %q, the record is %q", shardName, i, r.ID, e.ID)
			}
			if v.acked && v.seq != r.Seq {
				l.v.add("%s/%s acked at seq %d and again at seq %d", shardName, e.ID, v.seq, r.Seq)
			}
			v.acked, v.seq, v.mayLand = true, r.Seq, true
		case huntMaybe:
			v.mayLand = true
		default:
			if len(v.told) < 3 {
				v.told = append(v.told, fmt.Sprintf("%v (an append of %v)", err, entryIDs(entries)))
			}
		}
	}
}

// errClass names an error by the sentinel it matches, for the run's summary.
func errClass(err error) string {
	for _, c := range []struct {
		name string
		err  error
	}{
		{"fenced", shard.ErrFenced}, {"aborted", shard.ErrAborted}, {"closed", shard.ErrClosed},
		{"backpressure", shard.ErrBackpressure}, {"id-conflict", shard.ErrIDConflict},
		{"shutting-down", ErrShuttingDown}, {"deadline", context.DeadlineExceeded},
		{"canceled", context.Canceled}, {"storage", blob.ErrUnavailable}, {"not-found", blob.ErrNotFound},
	} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "other"
}

func entryIDs(entries []shard.Entry) []string {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids
}

// huntStored is one record as the store holds it.
type huntStored struct {
	seq   uint64
	hash  uint64
	count int
	gen   string
}

// check reads every shard straight from store (the fault-free inner store)
// and holds the ledger against it:
//
//   - every acknowledged record is stored, once, at its acknowledged seq,
//     with the content acknowledged, and a fresh Reader reads it back;
//   - no record is stored twice, and seqs increase through the live
//     generations;
//   - no stored record was only ever answered "not committed": for every
//     stored (id, content), some Append that carried that content was acked
//     or told it may have landed. An id shared by concurrent appends, or
//     sent again by a retry, counts every append that carried it: the
//     record's presence is a lie only if each of them said "not committed".
func (l *huntLedger) check(ctx context.Context, store blob.Store, shards []string) (stored int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	found := map[huntKey]*huntStored{}
	for _, s := range shards {
		stored += l.readShard(ctx, store, s, found)
	}
	keys := make([]huntKey, 0, len(found))
	for k := range found {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].shard+"/"+keys[i].id < keys[j].shard+"/"+keys[j].id })
	for _, k := range keys {
		st := found[k]
		if st.count > 1 {
			l.v.add("%s/%s is stored %d times", k.shard, k.id, st.count)
		}
		v := l.records[k][st.hash]
		switch {
		case v == nil:
			l.v.add("%s/%s is stored (seq %d, in %s) with content no answered append carried", k.shard, k.id, st.seq, st.gen)
		case !v.mayLand:
			l.v.add("%s/%s is stored (seq %d, in %s), but each of the %d appends that carried it was told it was not committed: %s",
				k.shard, k.id, st.seq, st.gen, v.appends, strings.Join(v.told, " | "))
		}
	}
	r := shard.NewReader(store, shard.ReaderOptions{})
	for k, byHash := range l.records {
		for h, v := range byHash {
			if !v.acked {
				continue
			}
			if v.seq <= l.deleted[k.shard] {
				continue // its incarnation was deleted
			}
			st := found[k]
			switch {
			case st == nil:
				l.v.add("acknowledged %s/%s (seq %d) is not stored", k.shard, k.id, v.seq)
				continue
			case st.hash != h:
				l.v.add("acknowledged %s/%s (seq %d) is stored with other content", k.shard, k.id, v.seq)
			case st.seq != v.seq:
				l.v.add("acknowledged %s/%s at seq %d is stored at seq %d", k.shard, k.id, v.seq, st.seq)
			}
			rec, err := r.Get(ctx, k.shard, k.id)
			if err != nil {
				l.v.add("acknowledged %s/%s: a fresh reader: %v", k.shard, k.id, err)
			} else if rec.GetSeq() != v.seq {
				l.v.add("acknowledged %s/%s at seq %d: a fresh reader reads seq %d", k.shard, k.id, v.seq, rec.GetSeq())
			}
		}
	}
	return stored
}

// readShard adds what one shard's live generations hold to found.
func (l *huntLedger) readShard(ctx context.Context, store blob.Store, shardName string, found map[huntKey]*huntStored) (n int) {
	// The reader's view: the manifest and, under protocol v2, the log
	// positions after its checkpoint.
	m, err := shard.NewReader(store, shard.ReaderOptions{}).Manifest(ctx, shardName)
	if errors.Is(err, shard.ErrShardNotFound) || errors.Is(err, shard.ErrShardDeleted) {
		return 0
	}
	if err != nil {
		l.v.add("%s: read manifest: %v", shardName, err)
		return 0
	}
	var last uint64
	for _, g := range m.GetGenerations() {
		name := format.BlobOf(shardName, g)
		data, _, err := store.Get(ctx, name, blob.GetOptions{})
		if err != nil {
			l.v.add("%s: live generation %s: %v", shardName, name, err)
			continue
		}
		footer, err := format.DecodeGeneration(data)
		if err != nil {
			l.v.add("%s: live generation %s: %v", shardName, name, err)
			continue
		}
		for _, e := range footer.GetEntries() {
			if e.GetSeq() <= last {
				l.v.add("%s: seq %d of %q (in %s) is not above %d", shardName, e.GetSeq(), e.GetId(), name, last)
			}
			last = e.GetSeq()
			if d := l.deleted[shardName]; e.GetSeq() <= d {
				l.v.add("%s [finding 3, delete]: seq %d of %q (in %s) is live, though a delete answered that it deleted every record through seq %d",
					shardName, e.GetSeq(), e.GetId(), name, d)
			}
			k := huntKey{shardName, e.GetId()}
			if st := found[k]; st != nil {
				st.count++
				continue
			}
			found[k] = &huntStored{seq: e.GetSeq(), hash: e.GetClientHash(), count: 1, gen: name}
			n++
		}
	}
	if m.GetRecordCount() != uint64(n) {
		l.v.add("%s: the manifest counts %d records, %d distinct ids are stored", shardName, m.GetRecordCount(), n)
	}
	return n
}

// summary is one line of what the callers were told.
func (l *huntLedger) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	classes := make([]string, 0, len(l.errs))
	for c, n := range l.errs {
		classes = append(classes, fmt.Sprintf("%s %d", c, n))
	}
	sort.Strings(classes)
	return fmt.Sprintf("%d acked, %d may have landed, %d not committed (%s)",
		l.outcomes[huntAcked], l.outcomes[huntMaybe], l.outcomes[huntNotCommitted], strings.Join(classes, ", "))
}

// huntViolations collects broken invariants.
type huntViolations struct {
	mu   sync.Mutex
	list []string
	more int
}

func (v *huntViolations) add(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.list) == 50 {
		v.more++
		return
	}
	v.list = append(v.list, fmt.Sprintf(format, args...))
}

func (v *huntViolations) any() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.list) > 0
}

func (v *huntViolations) String() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := strings.Join(v.list, "\n\t")
	if v.more > 0 {
		s += fmt.Sprintf("\n\t... and %d more", v.more)
	}
	return s
}
