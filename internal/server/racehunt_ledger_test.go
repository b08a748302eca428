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
	ackledger "github.com/rolloutd/rolloutd/internal/testutil/ledger"
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
	acks    *ackledger.Ledger // what storage is checked against
}

func newHuntLedger(v *huntViolations) *huntLedger {
	return &huntLedger{records: map[huntKey]map[uint64]*huntVariant{}, errs: map[string]int{}, deleted: map[string]uint64{}, v: v, acks: ackledger.New()}
}

// deletedThrough records that the shard's records at or below lastSeq were
// deleted.
func (l *huntLedger) deletedThrough(shardName string, lastSeq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deleted[shardName] = max(l.deleted[shardName], lastSeq)
	l.acks.DeletedThrough(shardName, lastSeq)
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
			if err := l.acks.Acked(shardName, e.ID, ackledger.Ack{Seq: r.Seq, Hash: e.ClientHash}); err != nil && !errors.Is(err, ackledger.ErrAckedAgain) {
				l.v.add("%v", err) // another seq, or other content under one id
			}
		case huntMaybe:
			v.mayLand = true
			l.acks.MayLand(shardName, e.ID, e.ClientHash)
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

// check reads the given shards straight from storage, through the shared
// ledger: every acknowledged record is stored exactly once, at its seq and
// with its content, unless a delete answered for it since; a stored record
// was carried by an append that was acked or may have landed; nothing at or
// below a delete's seq is live. Then a fresh reader must read every
// acknowledged record at its seq. It returns how many records are stored.
func (l *huntLedger) check(ctx context.Context, store blob.Store, shards []string) (stored int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := shard.NewReader(store, shard.ReaderOptions{})
	read, errs := l.acks.Check(ctx, store, ackledger.Manifests(r.Manifest, shard.ErrShardNotFound, shard.ErrShardDeleted), shards...)
	for _, sh := range read {
		stored += len(sh.Records)
	}
	for _, err := range errs {
		var u *ackledger.UnexpectedError
		if !errors.As(err, &u) {
			l.v.add("%v", err)
			continue
		}
		st := u.Stored
		switch v := l.records[huntKey{st.Shard, st.ID}][st.Hash]; {
		case v == nil:
			l.v.add("%s/%s is stored (seq %d, in %s) with content no answered append carried", st.Shard, st.ID, st.Seq, st.Blob)
		default:
			l.v.add("%s/%s is stored (seq %d, in %s), but each of the %d appends that carried it was told it was not committed: %s",
				st.Shard, st.ID, st.Seq, st.Blob, v.appends, strings.Join(v.told, " | "))
		}
	}
	for k, byHash := range l.records {
		for _, v := range byHash {
			if !v.acked || v.seq <= l.deleted[k.shard] {
				continue // not acked, or its incarnation was deleted
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
