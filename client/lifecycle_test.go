package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// The lifecycle methods against the real binary: list, describe, a
// BatchGet larger than the server's response cap (the client asks again
// for what was over it), a conditional delete refused then done.
func TestLifecycle(t *testing.T) {
	srv := startServer(t)
	c := newClient(t, srv.GRPCAddr)
	ctx := ctxFor(t, 60*time.Second)
	big := strings.Repeat("x", 200<<10)
	var ids []string
	for i := range 4 {
		var recs []*rolloutv1.Record
		for j := range 6 {
			id := fmt.Sprintf("r-%d-%d", i, j)
			ids = append(ids, id)
			recs = append(recs, &rolloutv1.Record{Id: id, Content: big})
		}
		if _, err := c.Append(ctx, "exp-9/a", recs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Append(ctx, "exp-9/b", []*rolloutv1.Record{{Id: "x"}}); err != nil {
		t.Fatal(err)
	}

	var listed []string
	for s, err := range c.AllShards(ctx, "exp-9", 1, true) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, s.GetShard())
	}
	if fmt.Sprint(listed) != "[exp-9/a exp-9/b]" {
		t.Fatalf("AllShards = %v", listed)
	}
	info, err := c.DescribeShard(ctx, "exp-9/a")
	if err != nil || info.GetRecords() != 24 || info.GetLastSeq() != 24 {
		t.Fatalf("DescribeShard = %v, %v", info, err)
	}

	req := append([]string{"missing"}, ids...) // 24 x 200 KiB: over the 3 MiB cap
	res, err := c.BatchGet(ctx, "exp-9/a", req, "id", "content")
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		switch {
		case i == 0:
			if !r.GetNotFound() {
				t.Errorf("missing id: %v", r)
			}
		case r.GetRecord().GetId() != req[i] || len(r.GetRecord().GetContent()) != len(big):
			t.Errorf("result %d: id %q, %d content bytes", i, r.GetRecord().GetId(), len(r.GetRecord().GetContent()))
		}
	}

	stale := uint64(3)
	_, err = c.DeleteShard(ctx, "exp-9/a", &stale)
	var ce *client.Error
	if !errors.Is(err, client.ErrSeqMismatch) || !errors.As(err, &ce) || ce.Metadata[client.MetadataLastSeq] != "24" {
		t.Fatalf("DeleteShard with a stale seq = %v, want ErrSeqMismatch naming 24", err)
	}
	last := info.GetLastSeq()
	del, err := c.DeleteShard(ctx, "exp-9/a", &last)
	if err != nil || del.GetRecords() != 24 {
		t.Fatalf("DeleteShard = %v, %v", del, err)
	}
	_, err = c.Get(ctx, "exp-9/a", "r-0-0")
	if !errors.Is(err, client.ErrShardDeleted) || !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Get after the delete = %v, want ErrShardDeleted", err)
	}
	if _, err := c.DescribeShard(ctx, "never"); !errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrShardDeleted) {
		t.Fatalf("DescribeShard of a shard never written = %v", err)
	}
}
