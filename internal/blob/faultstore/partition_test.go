package faultstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
)

// A partition cuts the names under its prefix only, never reaches the inner
// store, answers writes as of unknown outcome and reads as unavailable, and
// heals: a hung call then ends, and new calls pass.
func TestPartition(t *testing.T) {
	for _, hang := range []bool{false, true} {
		s, ctx := newStore(t, 1)
		if _, err := s.Put(ctx, "cut/a", []byte("a"), blob.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		heal := s.Partition("cut/", hang)
		s.ResetCounts()
		if _, err := s.Put(ctx, "kept/a", []byte("a"), blob.PutOptions{}); err != nil {
			t.Fatalf("hang=%v: a put outside the partition: %v", hang, err)
		}
		put := make(chan error, 1)
		go func() {
			_, err := s.Put(ctx, "cut/b", []byte("b"), blob.PutOptions{IfNoneMatch: true})
			put <- err
		}()
		get := make(chan error, 1)
		go func() {
			_, _, err := s.Get(ctx, "cut/a", blob.GetOptions{})
			get <- err
		}()
		if hang {
			select {
			case err := <-put:
				t.Fatalf("a put into a hanging partition returned before the heal: %v", err)
			case <-time.After(20 * time.Millisecond):
			}
			heal()
		}
		if err := <-put; !errors.Is(err, blob.ErrOutcomeUnknown) {
			t.Fatalf("hang=%v: a put cut by the partition: %v, want ErrOutcomeUnknown", hang, err)
		}
		if err := <-get; !errors.Is(err, blob.ErrUnavailable) {
			t.Fatalf("hang=%v: a get cut by the partition: %v, want ErrUnavailable", hang, err)
		}
		if n := s.InnerCalls(faultstore.OpPut); n != 1 {
			t.Fatalf("hang=%v: %d puts reached the store, want only the one outside the partition", hang, n)
		}
		heal()
		heal()
		if _, _, err := s.Get(ctx, "cut/a", blob.GetOptions{}); err != nil {
			t.Fatalf("hang=%v: a get after the heal: %v", hang, err)
		}
		if _, err := s.Head(ctx, "cut/b"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("hang=%v: the cut put was stored: %v", hang, err)
		}
	}
}
