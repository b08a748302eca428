package reliability

import (
	"context"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/server"
)

// writeCounter counts the writes that reach storage.
type writeCounter struct {
	blob.Store
	writes atomic.Int64
}

func (s *writeCounter) Put(ctx context.Context, name string, data []byte, opts blob.PutOptions) (blob.Attrs, error) {
	s.writes.Add(1)
	return s.Store.Put(ctx, name, data, opts)
}

func (s *writeCounter) Delete(ctx context.Context, name string, opts blob.DeleteOptions) error {
	s.writes.Add(1)
	return s.Store.Delete(ctx, name, opts)
}

// listing returns every blob name with its ETag.
func listing(t *testing.T, s blob.Store) map[string]blob.ETag {
	t.Helper()
	out := map[string]blob.ETag{}
	token := ""
	for {
		page, err := s.List(context.Background(), blob.ListOptions{Token: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			out[it.Name] = it.ETag
		}
		if page.Next == "" {
			return out
		}
		token = page.Next
	}
}

func f32(v float64) *float32 { f := float32(v); return &f }

// good is a valid record; bad requests break one field of it.
func good(id string) *rolloutv1.Record { return makeRecord("bad", id, 0) }

func with(id string, change func(r *rolloutv1.Record)) *rolloutv1.Record {
	r := good(id)
	change(r)
	return r
}

// TestBadInput sends every kind of bad value, field by field, over gRPC to
// a real server, and checks the status code, that the message names the
// field, and that nothing at all was written to storage: no blob written or
// deleted, no writer opened.
func TestBadInput(t *testing.T) {
	store := &writeCounter{Store: memstore.New()}
	in := startInstance(t, "bad", server.Config{
		Store:           store,
		MaxBatchRecords: 5,
		MaxRecordBytes:  4 << 10,
		MaxMessageBytes: 64 << 10,
	})
	defer in.stop(t, 5*time.Second)
	ctx := context.Background()
	// One valid shard, so that Get can miss an id in a shard that exists.
	if _, err := in.client.Append(ctx, &rolloutv1.AppendRequest{Shard: "bad/exists", Records: []*rolloutv1.Record{good("present")}}); err != nil {
		t.Fatal(err)
	}
	before, writes, opens := listing(t, store), store.writes.Load(), in.metric("rolloutd_writer_opens_total")

	one := func(shard string, recs ...*rolloutv1.Record) *rolloutv1.AppendRequest {
		if len(recs) == 0 {
			recs = []*rolloutv1.Record{good("a")}
		}
		return &rolloutv1.AppendRequest{Shard: shard, Records: recs}
	}
	appends := []struct {
		name  string
		req   *rolloutv1.AppendRequest
		code  codes.Code
		field string // the message must contain it
	}{
		// Shard names: empty, huge, path traversal, unicode tricks.
		{"empty shard", one(""), codes.InvalidArgument, "shard"},
		{"shard over 255 bytes", one(strings.Repeat("a/", 3) + strings.Repeat("a", 250)), codes.InvalidArgument, "shard"},
		{"shard segment over 63 bytes", one(strings.Repeat("a", 64)), codes.InvalidArgument, "shard"},
		{"shard with 5 segments", one("a/b/c/d/e"), codes.InvalidArgument, "shard"},
		{"shard ..", one(".."), codes.InvalidArgument, "shard"},
		{"shard .", one("."), codes.InvalidArgument, "shard"},
		{"shard a/../b", one("a/../b"), codes.InvalidArgument, "shard"},
		{"shard ../a", one("../a"), codes.InvalidArgument, "shard"},
		{"shard a/..", one("a/.."), codes.InvalidArgument, "shard"},
		{"shard a/./b", one("a/./b"), codes.InvalidArgument, "shard"},
		{"shard /a (absolute)", one("/a"), codes.InvalidArgument, "shard"},
		{"shard a/ (trailing slash)", one("a/"), codes.InvalidArgument, "shard"},
		{"shard a//b", one("a//b"), codes.InvalidArgument, "shard"},
		{`shard a\b`, one(`a\..\b`), codes.InvalidArgument, "shard"},
		{"shard url-encoded ..", one("a/%2e%2e/b"), codes.InvalidArgument, "shard"},
		{"shard _hidden segment", one("a/_manifest"), codes.InvalidArgument, "shard"},
		{"shard upper case", one("Exp"), codes.InvalidArgument, "shard"},
		{"shard fullwidth a", one("\uff41"), codes.InvalidArgument, "shard"},
		{"shard cyrillic a", one("\u0430"), codes.InvalidArgument, "shard"},
		{"shard zero-width space", one("a\u200bb"), codes.InvalidArgument, "shard"},
		{"shard right-to-left override", one("a\u202eb"), codes.InvalidArgument, "shard"},
		{"shard combining accent", one("e\u0301"), codes.InvalidArgument, "shard"},
		{"shard one-dot-leader", one("a\u2024\u2024"), codes.InvalidArgument, "shard"},
		{"shard NUL", one("a\x00b"), codes.InvalidArgument, "shard"},
		{"shard newline", one("a\nb"), codes.InvalidArgument, "shard"},
		{"shard space", one("a b"), codes.InvalidArgument, "shard"},

		// Batches: empty, too many records, oversized records and batches.
		{"empty batch", &rolloutv1.AppendRequest{Shard: "bad/s"}, codes.InvalidArgument, "records"},
		{"nil-equivalent record", one("bad/s", good("a"), &rolloutv1.Record{Reward: f32(math.NaN())}), codes.InvalidArgument, "records[1].reward"},
		{"too many records", one("bad/s", good("a"), good("b"), good("c"), good("d"), good("e"), good("f")), codes.ResourceExhausted, "records"},
		{"record over the limit", one("bad/s", good("a"), with("b", func(r *rolloutv1.Record) { r.Content = strings.Repeat("x", 5000) })), codes.ResourceExhausted, "records[1]"},
		{"message over the limit", one("bad/s", with("a", func(r *rolloutv1.Record) { r.BinaryPayload = make([]byte, 70<<10) })), codes.ResourceExhausted, "larger than max"},

		// Record ids.
		{"id with a space", one("bad/s", good("a"), good("b"), good("c d")), codes.InvalidArgument, "records[2].id"},
		{"id with a slash", one("bad/s", good("a/b")), codes.InvalidArgument, "records[0].id"},
		{"id ../x", one("bad/s", good("../x")), codes.InvalidArgument, "records[0].id"},
		{"id over 128 bytes", one("bad/s", good(strings.Repeat("x", 129))), codes.InvalidArgument, "records[0].id"},
		{"id unicode", one("bad/s", good("caf\u00e9")), codes.InvalidArgument, "records[0].id"},
		{"id NUL", one("bad/s", good("a\x00")), codes.InvalidArgument, "records[0].id"},
		{"id asterisk", one("bad/s", good("a*")), codes.InvalidArgument, "records[0].id"},
		{"duplicate ids", one("bad/s", good("x"), good("y"), good("z"), good("x")), codes.InvalidArgument, "records[3].id"},

		// Floats.
		{"NaN reward", one("bad/s", with("a", func(r *rolloutv1.Record) { r.Reward = f32(math.NaN()) })), codes.InvalidArgument, "records[0].reward"},
		{"+Inf reward", one("bad/s", with("a", func(r *rolloutv1.Record) { r.Reward = f32(math.Inf(1)) })), codes.InvalidArgument, "records[0].reward"},
		{"-Inf reward", one("bad/s", good("a"), with("b", func(r *rolloutv1.Record) { r.Reward = f32(math.Inf(-1)) })), codes.InvalidArgument, "records[1].reward"},
		{"NaN advantage", one("bad/s", with("a", func(r *rolloutv1.Record) { r.Advantage = f32(math.NaN()) })), codes.InvalidArgument, "records[0].advantage"},
		{"Inf score", one("bad/s", with("a", func(r *rolloutv1.Record) { r.Score = f32(math.Inf(1)) })), codes.InvalidArgument, "records[0].score"},
		{"NaN output logprob", one("bad/s", with("a", func(r *rolloutv1.Record) {
			r.OutputTokens, r.LossMask, r.OutputLogprobs = []int32{1, 2}, nil, []float32{-1, float32(math.NaN())}
		})), codes.InvalidArgument, "records[0].output_logprobs[1]"},
		{"-Inf ref logprob", one("bad/s", with("a", func(r *rolloutv1.Record) { r.RefLogprobs = []float32{float32(math.Inf(-1))} })), codes.InvalidArgument, "records[0].ref_logprobs[0]"},

		// Loss mask.
		{"loss mask shorter than output tokens", one("bad/s", with("a", func(r *rolloutv1.Record) { r.OutputTokens, r.LossMask = []int32{1, 2, 3}, []byte{1, 0} })), codes.InvalidArgument, "records[0].loss_mask"},
		{"loss mask without output tokens", one("bad/s", with("a", func(r *rolloutv1.Record) { r.OutputTokens, r.LossMask = nil, []byte{1} })), codes.InvalidArgument, "records[0].loss_mask"},
		{"loss mask value 2", one("bad/s", with("a", func(r *rolloutv1.Record) { r.OutputTokens, r.LossMask = []int32{1, 2}, []byte{1, 2} })), codes.InvalidArgument, "records[0].loss_mask[1]"},
	}
	for _, tt := range appends {
		t.Run("Append/"+tt.name, func(t *testing.T) {
			_, err := in.client.Append(ctx, tt.req)
			st := status.Convert(err)
			if st.Code() != tt.code || !strings.Contains(st.Message(), tt.field) {
				t.Errorf("got %v %q; want %v naming %q", st.Code(), st.Message(), tt.code, tt.field)
			}
		})
	}

	gets := []struct {
		name       string
		shard, id  string
		code       codes.Code
		field, msg string
	}{
		{"empty shard", "", "a", codes.InvalidArgument, "shard", ""},
		{"shard ..", "..", "a", codes.InvalidArgument, "shard", ""},
		{"shard a/../b", "a/../b", "a", codes.InvalidArgument, "shard", ""},
		{"shard /a", "/a", "a", codes.InvalidArgument, "shard", ""},
		{"shard upper case", "Bad", "a", codes.InvalidArgument, "shard", ""},
		{"shard cyrillic", "b\u0430d", "a", codes.InvalidArgument, "shard", ""},
		{"shard over 255 bytes", strings.Repeat("a/", 3) + strings.Repeat("a", 250), "a", codes.InvalidArgument, "shard", ""},
		{"empty id", "bad/exists", "", codes.InvalidArgument, "id", ""},
		{"id with a slash", "bad/exists", "a/b", codes.InvalidArgument, "id", ""},
		{"id over 128 bytes", "bad/exists", strings.Repeat("x", 129), codes.InvalidArgument, "id", ""},
		{"shard never written", "bad/never", "a", codes.NotFound, "shard", `"bad/never"`},
		{"id not in the shard", "bad/exists", "absent", codes.NotFound, "id", `"absent"`},
	}
	for _, tt := range gets {
		t.Run("Get/"+tt.name, func(t *testing.T) {
			_, err := in.client.Get(ctx, &rolloutv1.GetRequest{Shard: tt.shard, Id: tt.id})
			st := status.Convert(err)
			if st.Code() != tt.code || !strings.Contains(st.Message(), tt.field) || !strings.Contains(st.Message(), tt.msg) {
				t.Errorf("got %v %q; want %v naming %q %s", st.Code(), st.Message(), tt.code, tt.field, tt.msg)
			}
		})
	}

	if n := store.writes.Load() - writes; n != 0 {
		t.Errorf("rejected requests wrote to storage %d times", n)
	}
	after := listing(t, store)
	for name, etag := range after {
		if before[name] != etag {
			t.Errorf("blob %s appeared or changed during the rejected requests", name)
		}
	}
	if len(after) != len(before) {
		t.Errorf("storage held %d blobs before the rejected requests and %d after", len(before), len(after))
	}
	if n := in.metric("rolloutd_writer_opens_total") - opens; n != 0 {
		t.Errorf("rejected requests opened %v shard writers", n)
	}
	t.Logf("%d bad Appends and %d bad Gets rejected; storage untouched", len(appends), len(gets))
}
