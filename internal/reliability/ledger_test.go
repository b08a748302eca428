package reliability

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/shard"
	ackledger "github.com/rolloutd/rolloutd/internal/testutil/ledger"
)

// makeRecord builds the record a client sends for id: every field is derived
// from the shard and the id, so that what is read back can be compared with
// what was sent, field by field. pad adds that many bytes of content.
func makeRecord(shardName, id string, pad int) *rolloutv1.Record {
	h := fnv.New64a()
	h.Write([]byte(shardName + "\x00" + id))
	x := h.Sum64()
	reward := float32(x%1000) / 1000
	tokens := make([]int32, 1+x%5)
	mask := make([]byte, len(tokens))
	logprobs := make([]float32, len(tokens))
	for i := range tokens {
		tokens[i] = int32(x>>(i*8)) & 0xffff
		mask[i] = byte(x>>i) & 1
		logprobs[i] = -float32(i+1) / 8
	}
	content := "content of " + shardName + "/" + id
	if pad > 0 {
		content += " " + strings.Repeat(string(rune('a'+x%26)), pad)
	}
	return &rolloutv1.Record{
		Id:             id,
		RolloutId:      "rollout-" + id,
		Role:           rolloutv1.Role_ROLE_ASSISTANT,
		CreatedAt:      timestamppb.New(time.Unix(1_700_000_000+int64(x%100000), int64(x%1000))),
		Content:        content,
		OutputTokens:   tokens,
		OutputLogprobs: logprobs,
		LossMask:       mask,
		Reward:         &reward,
		Metadata:       map[string]string{"shard": shardName},
	}
}

// brief describes a record in one short line, for violation messages.
func brief(r *rolloutv1.Record) string {
	if r == nil {
		return "<nil>"
	}
	return fmt.Sprintf("{id %q seq %d content %d bytes, %d tokens}", r.GetId(), r.GetSeq(), len(r.GetContent()), len(r.GetOutputTokens()))
}

// differing names the top-level fields in which two records differ.
func differing(a, b *rolloutv1.Record) []string {
	var out []string
	fields := a.ProtoReflect().Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if !a.ProtoReflect().Get(fd).Equal(b.ProtoReflect().Get(fd)) {
			out = append(out, string(fd.Name()))
		}
	}
	return out
}

// ack is what the server told a client about one record.
type ack struct {
	seq, epoch, generation uint64
}

// ledger is the clients' side of the story: every record sent (which may
// be stored, once) and every record acknowledged (which must be stored,
// exactly once, with the acknowledged seq and the content sent).
type ledger struct {
	mu     sync.Mutex
	shards map[string]*shardLedger
	acks   *ackledger.Ledger // what storage is checked against
}

type shardLedger struct {
	sent  map[string]*rolloutv1.Record
	acked map[string]ack
	order []string // acked ids, in ack order
}

func newLedger() *ledger { return &ledger{shards: map[string]*shardLedger{}, acks: ackledger.New()} }

func (l *ledger) shard(name string) *shardLedger {
	s := l.shards[name]
	if s == nil {
		s = &shardLedger{sent: map[string]*rolloutv1.Record{}, acked: map[string]ack{}}
		l.shards[name] = s
	}
	return s
}

// sent notes records about to be sent. A record id is only ever sent with
// one content.
func (l *ledger) sent(shardName string, recs []*rolloutv1.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.shard(shardName)
	for _, r := range recs {
		s.sent[r.GetId()] = r
		l.acks.MayLand(shardName, r.GetId(), 0)
	}
}

// acked records an Append's results. It reports a result for an id that was
// not sent, one with no seq, and an id acknowledged twice with different
// seqs (a retry of an acknowledged id must find it present at its seq).
func (l *ledger) acked(shardName string, results []*rolloutv1.AppendResult) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.shard(shardName)
	var errs []error
	for _, r := range results {
		id := r.GetId()
		if _, ok := s.sent[id]; !ok {
			errs = append(errs, fmt.Errorf("shard %s: ack for id %q that was never sent", shardName, id))
			continue
		}
		if r.GetSeq() == 0 || r.GetEpoch() == 0 || r.GetGeneration() == 0 {
			errs = append(errs, fmt.Errorf("shard %s: ack for %q without seq/epoch/generation: %v", shardName, id, r))
		}
		a := ack{r.GetSeq(), r.GetEpoch(), r.GetGeneration()}
		if prev, dup := s.acked[id]; dup && prev.seq != a.seq {
			errs = append(errs, fmt.Errorf("shard %s: id %q acknowledged at seq %d and again at seq %d", shardName, id, prev.seq, a.seq))
			continue
		}
		if _, dup := s.acked[id]; !dup {
			s.acked[id] = a
			s.order = append(s.order, id)
			_ = l.acks.Acked(shardName, id, ackledger.Ack{Seq: a.seq}) // the first ack: no error
		}
	}
	return errors.Join(errs...)
}

// pickAcked returns an acknowledged (shard, id, ack) chosen by n, or false
// when nothing is acknowledged yet.
func (l *ledger) pickAcked(n func(int) int) (string, string, ack, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var names []string
	for name, s := range l.shards {
		if len(s.acked) > 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "", "", ack{}, false
	}
	sort.Strings(names)
	name := names[n(len(names))]
	s := l.shards[name]
	id := s.order[n(len(s.order))]
	return name, id, s.acked[id], true
}

// expected returns the record as it must read back: the content sent, with
// the acknowledged seq.
func (l *ledger) expected(shardName, id string) (*rolloutv1.Record, ack, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.shards[shardName]
	if s == nil {
		return nil, ack{}, false
	}
	a, ok := s.acked[id]
	if !ok {
		return nil, ack{}, false
	}
	want := proto.CloneOf(s.sent[id])
	want.Seq = a.seq
	return want, a, true
}

// sentRecord returns the record sent with id, or nil.
func (l *ledger) sentRecord(shardName, id string) *rolloutv1.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.shards[shardName]; s != nil {
		return s.sent[id]
	}
	return nil
}

func (l *ledger) counts() (sent, acked int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.shards {
		sent += len(s.sent)
		acked += len(s.acked)
	}
	return sent, acked
}

// ackedIDs returns every acknowledged (shard, id), sorted.
func (l *ledger) ackedIDs() [][2]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out [][2]string
	for name, s := range l.shards {
		for id := range s.acked {
			out = append(out, [2]string{name, id})
		}
	}
	slices.SortFunc(out, func(a, b [2]string) int { return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) })
	return out
}

// storeReport sums up what checkStore found.
type storeReport struct {
	shards, generations, stored, acked int
	seqs                               map[string][]uint64 // shard → its stored seqs, increasing
}

// checkStore reads every shard of the ledger straight from storage, without
// rolloutd's reader, and checks the invariants:
//
//   - every acknowledged record is stored exactly once, at its acknowledged
//     seq, with exactly the content that was sent;
//   - no record is stored twice, and none that was never sent is stored;
//   - seqs are unique and strictly increasing through the live
//     generations, each generation's blob matches its manifest entry, and
//     the manifest's record count and next seq agree with what is stored.
//
// All but the content are the shared ledger's checks.
func (l *ledger) checkStore(ctx context.Context, store blob.Store) (storeReport, []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	read := shard.NewReader(store, shard.ReaderOptions{}).Manifest
	shards, errs := l.acks.Check(ctx, store, ackledger.Manifests(read, shard.ErrShardNotFound))
	rep := storeReport{seqs: map[string][]uint64{}}
	names := make([]string, 0, len(l.shards))
	for name := range l.shards {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s, sh := l.shards[name], shards[name]
		rep.shards++
		rep.acked += len(s.acked)
		rep.generations += sh.Generations
		rep.stored += len(sh.Records)
		for _, st := range sh.Records {
			rep.seqs[name] = append(rep.seqs[name], st.Seq)
		}
		errs = append(errs, checkContent(name, s, sh)...)
	}
	return rep, errs
}

// checkContent checks that each stored record that was sent reads back as
// it was sent, with its stored seq.
func checkContent(name string, s *shardLedger, sh *ackledger.Shard) (errs []error) {
	for _, st := range sh.Records {
		sent, ok := s.sent[st.ID]
		if !ok || st.Record == nil {
			continue // the shared ledger reported it
		}
		got := &rolloutv1.Record{}
		if err := proto.Unmarshal(st.Record, got); err != nil {
			errs = append(errs, fmt.Errorf("shard %s: record %q in %s: %v", name, st.ID, st.Blob, err))
			continue
		}
		want := proto.CloneOf(sent)
		want.Seq = st.Seq
		if !proto.Equal(got, want) {
			errs = append(errs, fmt.Errorf("shard %s: id %q reads back different from what was sent: %v differ (got %s, sent %s)", name, st.ID, differing(got, want), brief(got), brief(want)))
		}
	}
	return errs
}
