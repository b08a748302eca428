package shard

import (
	"context"
	"fmt"
	"testing"

	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// BenchmarkPutsPerAppend reports the blob writes (PUTs, merges and
// checkpoints included) and DELETEs a lone client's appends cost, per
// acknowledged append, of which the floor is one. The metric, not the
// time, is the point:
//
//	go test -run '^$' -bench PutsPerAppend -benchtime 2000x ./internal/shard
func BenchmarkPutsPerAppend(b *testing.B) {
	for _, p := range []string{"v2"} {
		b.Run(p, func(b *testing.B) {
			fs := faultstore.New(memstore.New(), 1)
			opts := Options{}
			w, err := Open(context.Background(), fs, "s", opts)
			if err != nil {
				b.Fatal(err)
			}
			fs.ResetCounts()
			for i := 0; b.Loop(); i++ {
				if _, err := w.Append(context.Background(), entries(b, fmt.Sprint("r", i))); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Close(context.Background()); err != nil {
				b.Fatal(err)
			}
			st := w.Stats()
			b.Logf("%d appends: %d live generations, %d merges, %d checkpoints", b.N, st.Generations, st.Merges, st.Checkpoints)
			b.ReportMetric(float64(fs.Calls(faultstore.OpPut))/float64(b.N), "puts/append")
			b.ReportMetric(float64(fs.Calls(faultstore.OpDelete))/float64(b.N), "deletes/append")
		})
	}
}
