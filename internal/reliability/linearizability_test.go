package reliability

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// A sequential model of one shard, for porcupine.
//
// The state is the shard's records in seq order: seqs are dense, so a
// record's seq is its position plus one. Append assigns the next seqs, in
// request order, to the ids not yet stored, and reports the ids already
// stored at their seqs, as present. Get finds an id at its seq, or not at
// all. An Append whose outcome the client never learned (it failed, timed
// out or was cut off) may have taken effect at any moment after it was
// called, or never: the model allows both, and the operation stays open
// until the end of the history.

// linInput is one client call.
type linInput struct {
	shard string
	get   bool
	ids   []string // Append
	id    string   // Get
}

// linOutput is what the client saw.
type linOutput struct {
	unknown bool     // Append failed: outcome unknown
	seqs    []uint64 // Append: one per id
	present []bool   // Append: one per id
	found   bool     // Get
	seq     uint64   // Get
}

// shardState is the model's state: ids in seq order, joined by "\n".
type shardState string

func (s shardState) ids() []string {
	if s == "" {
		return nil
	}
	return strings.Split(string(s), "\n")
}

func (s shardState) seqOf(id string) uint64 {
	for i, x := range s.ids() {
		if x == id {
			return uint64(i + 1)
		}
	}
	return 0
}

// apply appends the ids not yet stored and returns the new state and the
// seq and presence of each id.
func (s shardState) apply(ids []string) (shardState, []uint64, []bool) {
	cur := s.ids()
	pos := make(map[string]int, len(cur))
	for i, x := range cur {
		pos[x] = i + 1
	}
	seqs := make([]uint64, len(ids))
	present := make([]bool, len(ids))
	for i, id := range ids {
		if p, ok := pos[id]; ok {
			seqs[i], present[i] = uint64(p), true
			continue
		}
		cur = append(cur, id)
		pos[id] = len(cur)
		seqs[i] = uint64(len(cur))
	}
	return shardState(strings.Join(cur, "\n")), seqs, present
}

var shardModel = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byShard := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			s := op.Input.(linInput).shard
			if _, ok := byShard[s]; !ok {
				order = append(order, s)
			}
			byShard[s] = append(byShard[s], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, s := range order {
			out = append(out, byShard[s])
		}
		return out
	},
	Init: func() []any { return []any{shardState("")} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(shardState), input.(linInput), output.(linOutput)
		if in.get {
			if seq := s.seqOf(in.id); out.found == (seq != 0) && (!out.found || seq == out.seq) {
				return []any{s}
			}
			return nil
		}
		next, seqs, present := s.apply(in.ids)
		if out.unknown {
			if next == s {
				return []any{s}
			}
			return []any{s, next}
		}
		if slices.Equal(seqs, out.seqs) && slices.Equal(present, out.present) {
			return []any{next}
		}
		return nil
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		if in.get {
			if out.found {
				return fmt.Sprintf("Get(%s) → seq %d", in.id, out.seq)
			}
			return fmt.Sprintf("Get(%s) → not found", in.id)
		}
		if out.unknown {
			return fmt.Sprintf("Append(%v) → ?", in.ids)
		}
		return fmt.Sprintf("Append(%v) → seqs %v present %v", in.ids, out.seqs, out.present)
	},
	DescribeState: func(state any) string {
		ids := state.(shardState).ids()
		if len(ids) > 8 {
			return fmt.Sprintf("%d records: … %v", len(ids), ids[len(ids)-8:])
		}
		return fmt.Sprintf("%v", ids)
	},
}).ToModel()

// history collects operations from many clients.
type history struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) add(client int, in linInput, out linOutput, call, ret int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
}

// TestLinearizable records every client's Append and Get calls, with their
// call and return times, while they run through two instances over a
// faulty store, and checks with porcupine that the history of each shard is
// linearizable against the sequential model above: every Get sees every
// append acknowledged before it started, seqs are dense and assigned once,
// and an append that failed either took effect once or not at all.
func TestLinearizable(t *testing.T) {
	seeds(t, 2, func(t *testing.T, seed int64) {
		checkLinearizable(t, seed, 3, 6, 40)
	})
}

func checkLinearizable(t *testing.T, seed int64, shards, clients, opsPerClient int) {
	leaks := goleak.IgnoreCurrent()
	hint := fmt.Sprintf("reproduce with ROLLOUTD_SIM_SEED=%d", seed)
	fs := faultstore.New(memstore.New(), seed)
	addFaults(fs, 1)
	rng := newRand(seed, 2)
	cfg := simServerConfig(fs)
	p := newPool(startInstance(t, "a", cfg), startInstance(t, "b", cfg))

	h := &history{start: time.Now()}
	l := newLedger()
	var v violations
	var failures codeCounts
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			var mine [][2]string // (shard, id) this client appended, acked or not
			for i := range opsPerClient {
				if rng.intN(10) < 4 && len(mine) > 0 {
					// Get one of ours (acked, or maybe not), or one that
					// was never appended.
					k := mine[rng.intN(len(mine))]
					if rng.intN(5) == 0 {
						k[1] = fmt.Sprintf("never-c%d-%d", c, i)
					}
					linGet(h, p.get(rng.intN(2)), c, k[0], k[1], l, &v, &failures, rng)
					continue
				}
				sh := fmt.Sprintf("lin/s%d", rng.intN(shards))
				recs := make([]*rolloutv1.Record, 1+rng.intN(3))
				for j := range recs {
					recs[j] = makeRecord(sh, fmt.Sprintf("c%d-%d-%d", c, i, j), rng.intN(500))
					mine = append(mine, [2]string{sh, recs[j].GetId()})
				}
				l.sent(sh, recs)
				linAppend(h, p, c, &rolloutv1.AppendRequest{Shard: sh, Records: recs}, l, &v, &failures, rng)
			}
		})
	}
	wg.Wait()
	fs.Clear()
	p.get(0).stop(t, 5*time.Second)
	p.get(1).stop(t, 5*time.Second)

	res, info := porcupine.CheckOperationsVerbose(shardModel, h.ops, time.Minute)
	unknown := 0
	for _, op := range h.ops {
		if out := op.Output.(linOutput); out.unknown {
			unknown++
		}
	}
	t.Logf("%d operations (%d appends with unknown outcome) on %d shards by %d clients; failures by code: %v; porcupine: %s",
		len(h.ops), unknown, shards, clients, &failures, res)
	switch res {
	case porcupine.Illegal:
		path := filepath.Join(os.TempDir(), fmt.Sprintf("rolloutd-linearizability-%d.html", seed))
		if err := porcupine.VisualizePath(shardModel, info, path); err == nil {
			t.Logf("visualization of the history: %s", path)
		}
		v.add("the history is not linearizable")
	case porcupine.Unknown:
		v.add("porcupine could not decide the history within its timeout")
	}
	v.report(t, hint)
	if err := goleak.Find(leaks); err != nil {
		t.Errorf("goroutine leak: %v; %s", err, hint)
	}
}

// linAppend sends req until it is acknowledged, recording every attempt:
// a failed one as an append with unknown outcome.
func linAppend(h *history, p *pool, client int, req *rolloutv1.AppendRequest, l *ledger, v *violations, failures *codeCounts, rng *lockedRand) {
	in := linInput{shard: req.GetShard()}
	for _, r := range req.GetRecords() {
		in.ids = append(in.ids, r.GetId())
	}
	for range 100 {
		inst := p.get(rng.intN(2))
		ctx, cancel := context.WithTimeout(context.Background(), rng.between(20*time.Millisecond, time.Second))
		call := h.now()
		resp, err := inst.client.Append(ctx, req)
		ret := h.now()
		cancel()
		if err != nil {
			failures.add(err)
			h.add(client, in, linOutput{unknown: true}, call, math.MaxInt64)
			if !retryable(err) {
				v.add("Append %v on %s: non-retryable %v", in.ids, inst.name, err)
				return
			}
			time.Sleep(rng.between(time.Millisecond, 10*time.Millisecond))
			continue
		}
		out := linOutput{}
		for _, r := range resp.GetResults() {
			out.seqs = append(out.seqs, r.GetSeq())
			out.present = append(out.present, r.GetAlreadyPresent())
		}
		h.add(client, in, out, call, ret)
		v.addErr(l.acked(req.GetShard(), resp.GetResults()))
		return
	}
	v.add("Append %v: not acked after 100 tries", in.ids)
}

// linGet reads id once and records the outcome; a failed read says nothing
// and is left out of the history.
func linGet(h *history, inst *instance, client int, sh, id string, l *ledger, v *violations, failures *codeCounts, rng *lockedRand) {
	ctx, cancel := context.WithTimeout(context.Background(), rng.between(50*time.Millisecond, time.Second))
	defer cancel()
	call := h.now()
	resp, err := inst.client.Get(ctx, &rolloutv1.GetRequest{Shard: sh, Id: id})
	ret := h.now()
	in := linInput{shard: sh, get: true, id: id}
	switch {
	case err == nil:
		h.add(client, in, linOutput{found: true, seq: resp.GetRecord().GetSeq()}, call, ret)
		got := proto.CloneOf(resp.GetRecord())
		got.Seq = 0
		if want := l.sentRecord(sh, id); !proto.Equal(got, want) {
			v.add("Get %s/%s on %s: read %s, sent %s", sh, id, inst.name, brief(resp.GetRecord()), brief(want))
		}
	case status.Code(err) == codes.NotFound:
		h.add(client, in, linOutput{}, call, ret)
	default:
		failures.add(err)
		if !retryable(err) {
			v.add("Get %s/%s on %s: %v", sh, id, inst.name, err)
		}
	}
}

// TestShardModel checks the checker: the model accepts the histories a
// correct shard can produce and rejects a lost ack, a reused seq, a
// duplicate and a stale read after an ack.
func TestShardModel(t *testing.T) {
	app := func(client int, ids []string, seqs []uint64, present []bool, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: linInput{shard: "s", ids: ids}, Output: linOutput{seqs: seqs, present: present}, Call: call, Return: ret}
	}
	unknown := func(client int, ids []string, call int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: linInput{shard: "s", ids: ids}, Output: linOutput{unknown: true}, Call: call, Return: math.MaxInt64}
	}
	get := func(client int, id string, seq uint64, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: linInput{shard: "s", get: true, id: id}, Output: linOutput{found: seq != 0, seq: seq}, Call: call, Return: ret}
	}
	x, y := []string{"x"}, []string{"y"}
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"append then read", []porcupine.Operation{app(0, x, []uint64{1}, []bool{false}, 0, 10), get(1, "x", 1, 20, 30)}, porcupine.Ok},
		{"concurrent read may miss", []porcupine.Operation{app(0, x, []uint64{1}, []bool{false}, 0, 10), get(1, "x", 0, 5, 15)}, porcupine.Ok},
		{"lost ack", []porcupine.Operation{app(0, x, []uint64{1}, []bool{false}, 0, 10), get(1, "x", 0, 20, 30)}, porcupine.Illegal},
		{"seq reused", []porcupine.Operation{app(0, x, []uint64{1}, []bool{false}, 0, 10), app(1, y, []uint64{1}, []bool{false}, 20, 30)}, porcupine.Illegal},
		{"stored twice", []porcupine.Operation{app(0, x, []uint64{1}, []bool{false}, 0, 10), app(0, x, []uint64{2}, []bool{false}, 20, 30)}, porcupine.Illegal},
		{"retry not reported present", []porcupine.Operation{app(0, x, []uint64{1}, []bool{false}, 0, 10), app(0, x, []uint64{1}, []bool{false}, 20, 30)}, porcupine.Illegal},
		{"unknown append that landed", []porcupine.Operation{unknown(0, x, 0), app(1, y, []uint64{2}, []bool{false}, 20, 30)}, porcupine.Ok},
		{"unknown append that did not", []porcupine.Operation{unknown(0, x, 0), app(1, y, []uint64{1}, []bool{false}, 20, 30), get(1, "x", 0, 40, 50)}, porcupine.Ok},
		{"retry finds an unknown append", []porcupine.Operation{unknown(0, x, 0), app(0, x, []uint64{1}, []bool{true}, 20, 30)}, porcupine.Ok},
		{"unknown append landing twice", []porcupine.Operation{unknown(0, x, 0), get(1, "x", 1, 20, 30), get(1, "x", 2, 40, 50)}, porcupine.Illegal},
	} {
		if got := porcupine.CheckOperationsTimeout(shardModel, tc.ops, 10*time.Second); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
