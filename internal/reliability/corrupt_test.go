package reliability

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/server"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// TestCorruptStoredBytes damages stored blobs in every region (a record's
// bytes, the id filter, the footer, the trailer, the manifest) and reads
// through a fresh server each time: a Get must answer DataLoss naming the
// damaged blob, or, when the damage does not touch what it reads, the
// record exactly as sent. Never a panic, never wrong data.
func TestCorruptStoredBytes(t *testing.T) {
	mem := memstore.New()
	ctx := context.Background()
	const sh = "corrupt/s"
	recs := []*rolloutv1.Record{makeRecord(sh, "a", 100), makeRecord(sh, "b", 2000), makeRecord(sh, "c", 10)}
	w := startInstance(t, "writer", server.Config{Store: mem, Writer: shard.Options{DisableMerge: true}})
	resp, err := w.client.Append(ctx, &rolloutv1.AppendRequest{Shard: sh, Records: recs})
	if err != nil {
		t.Fatal(err)
	}
	w.stop(t, 5*time.Second)
	r := resp.GetResults()[0]
	gen := format.LogName(sh, r.GetGeneration()) // protocol v2: the ack names the log position
	manifest := format.ManifestName(sh)
	good := map[string][]byte{}
	for _, name := range []string{gen, manifest} {
		b, _, err := mem.Get(ctx, name, blob.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		good[name] = b
	}

	type damage struct {
		name string
		blob string
		edit func(b []byte) []byte
	}
	flip := func(at func(n int) int) func([]byte) []byte {
		return func(b []byte) []byte {
			b = append([]byte(nil), b...)
			b[at(len(b))] ^= 0x40
			return b
		}
	}
	var cases []damage
	n := len(good[gen])
	for _, at := range []int{0, 1, 50, 200, 1000, 2000, n / 2, n - 200, n - 100, n - 40, n - 20, n - 10, n - 5, n - 1} {
		if at >= 0 && at < n {
			cases = append(cases, damage{"generation byte " + strconv.Itoa(at), gen, flip(func(int) int { return at })})
		}
	}
	cases = append(cases,
		damage{"generation truncated by one byte", gen, func(b []byte) []byte { return b[:len(b)-1] }},
		damage{"generation truncated to half", gen, func(b []byte) []byte { return b[:len(b)/2] }},
		damage{"generation emptied", gen, func([]byte) []byte { return nil }},
		damage{"manifest byte 0", manifest, flip(func(int) int { return 0 })},
		damage{"manifest middle byte", manifest, flip(func(n int) int { return n / 2 })},
		damage{"manifest last byte", manifest, flip(func(n int) int { return n - 1 })},
		damage{"manifest truncated", manifest, func(b []byte) []byte { return b[:len(b)-3] }},
		damage{"manifest garbage", manifest, func([]byte) []byte { return []byte("not a manifest") }},
	)
	dataLoss := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := mem.Put(ctx, c.blob, c.edit(good[c.blob]), blob.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			defer mem.Put(ctx, c.blob, good[c.blob], blob.PutOptions{})
			core, logs := observer.New(zapcore.WarnLevel)
			in := startInstance(t, "reader", server.Config{Store: mem, Logger: zap.New(core), Writer: shard.Options{DisableMerge: true}})
			defer in.stop(t, 5*time.Second)
			for i, rec := range recs {
				got, err := in.client.Get(ctx, &rolloutv1.GetRequest{Shard: sh, Id: rec.GetId()})
				want := proto.CloneOf(rec)
				want.Seq = resp.GetResults()[i].GetSeq()
				switch {
				case err == nil:
					if !proto.Equal(got.GetRecord(), want) {
						t.Errorf("Get %s through damaged storage returned wrong data: %s, want %s", rec.GetId(), brief(got.GetRecord()), brief(want))
					}
				case status.Code(err) == codes.DataLoss:
					dataLoss++
					// The client is told the request id; the server's
					// log names the blob under it.
					msg := status.Convert(err).Message()
					_, id, ok := strings.Cut(msg, "request id ")
					if !ok || strings.Contains(msg, c.blob) {
						t.Errorf("Get %s: DataLoss %q, want a request id and no blob name", rec.GetId(), msg)
						break
					}
					named := false
					for _, e := range logs.FilterField(zap.String("request_id", id)).All() {
						named = named || strings.Contains(fmt.Sprint(e.ContextMap()["error"]), c.blob)
					}
					if !named {
						t.Errorf("Get %s: no log line under request id %s names the blob %s", rec.GetId(), id, c.blob)
					}
				default:
					t.Errorf("Get %s through damaged storage: %v, want DataLoss naming %s", rec.GetId(), err, c.blob)
				}
			}
		})
	}
	t.Logf("%d kinds of damage, %d Gets answered DataLoss (the blob named in the log), the rest read back intact", len(cases), dataLoss)
}
