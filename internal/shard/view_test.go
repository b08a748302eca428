package shard

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/shardlog"
	"github.com/rolloutd/rolloutd/internal/shard/storagepb"
)

// TestViewExtendedPerCommitIsTheView: the view each commit extends is the
// checkpoint with the tail, as ViewOf builds it from them, through
// checkpoints and merges landing between commits, and every view the
// writer handed out before stays as it was.
func TestViewExtendedPerCommitIsTheView(t *testing.T) {
	ctx := context.Background()
	w, err := Open(ctx, memstore.New(), "view", Options{Logger: zap.NewNop(), CheckpointEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	type seen struct{ view, was *storagepb.Manifest }
	var views []seen
	for i := range 300 {
		if _, err := w.Append(ctx, []Entry{kib1Entry(t, fmt.Sprint("id-", i))}); err != nil {
			t.Fatal(err)
		}
		w.w.mu.Lock()
		got, want, isCkpt := w.w.m, shardlog.ViewOf(w.w.ckpt, w.w.tail), w.w.m == w.w.ckpt
		w.w.mu.Unlock()
		if !proto.Equal(got, want) {
			t.Fatalf("after append %d the writer's view is\n%v\nnot\n%v", i, got, want)
		}
		// A checkpoint is never appended to; a view may be extended.
		if g := got.GetGenerations(); !isCkpt && cap(g) != len(g) {
			t.Fatalf("after append %d the view's generations have room to append into (%d of %d)", i, len(g), cap(g))
		}
		views = append(views, seen{got, proto.CloneOf(got)})
	}
	for i, v := range views {
		if !proto.Equal(v.view, v.was) {
			t.Fatalf("view %d changed after it was handed out", i)
		}
	}
	if st := w.Stats(); st.Merges == 0 {
		t.Fatalf("no merge landed (%+v): the test did not cover views across merges", st)
	}
}
