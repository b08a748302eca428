package faultstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

func TestPartitionedCutsAndHeals(t *testing.T) {
	ctx := context.Background()
	inner := memstore.New()
	p := faultstore.NewPartitioned(inner)
	if _, err := p.Put(ctx, "a/x", []byte("1"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode               faultstore.CutMode
		putClass, getClass error
	}{
		{faultstore.CutFail, blob.ErrUnavailable, blob.ErrUnavailable},
		{faultstore.CutLose, blob.ErrOutcomeUnknown, blob.ErrUnavailable},
	} {
		heal := p.Cut(faultstore.Cut{Prefixes: []string{"a/"}, Mode: tc.mode})
		if _, err := p.Put(ctx, "a/y", []byte("2"), blob.PutOptions{}); !errors.Is(err, tc.putClass) {
			t.Errorf("%v: put under the cut: %v, want %v", tc.mode, err, tc.putClass)
		}
		if _, _, err := p.Get(ctx, "a/x", blob.GetOptions{}); !errors.Is(err, tc.getClass) {
			t.Errorf("%v: get under the cut: %v, want %v", tc.mode, err, tc.getClass)
		}
		if _, err := p.Put(ctx, "b/y", []byte("2"), blob.PutOptions{}); err != nil {
			t.Errorf("%v: put outside the cut: %v", tc.mode, err)
		}
		if _, _, err := inner.Get(ctx, "a/y", blob.GetOptions{}); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("%v: a cut put reached the store: %v", tc.mode, err)
		}
		heal()
		heal() // idempotent
		if _, _, err := p.Get(ctx, "a/x", blob.GetOptions{}); err != nil {
			t.Errorf("%v: get after healing: %v", tc.mode, err)
		}
	}
}

func TestPartitionedHangEndsWithContextOrHeal(t *testing.T) {
	p := faultstore.NewPartitioned(memstore.New())
	heal := p.Cut(faultstore.Cut{Mode: faultstore.CutHang, Ops: []faultstore.Op{faultstore.OpPut}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := p.Put(ctx, "x", nil, blob.PutOptions{}); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, blob.ErrOutcomeUnknown) {
		t.Errorf("hung put after its deadline: %v, want outcome unknown and the deadline", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Put(context.Background(), "x", nil, blob.PutOptions{})
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	heal()
	if err := <-done; !errors.Is(err, blob.ErrOutcomeUnknown) {
		t.Errorf("hung put at heal: %v, want outcome unknown", err)
	}
	if _, err := p.Put(context.Background(), "x", nil, blob.PutOptions{}); err != nil {
		t.Errorf("put after heal: %v", err)
	}
	if p.Cuts() != 0 {
		t.Errorf("%d cuts after heal", p.Cuts())
	}
}
