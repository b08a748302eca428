package server

import (
	"context"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc/tap"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	tledger "github.com/rolloutd/rolloutd/internal/testutil/ledger"
)

// BenchmarkAdmissionPerRPC is admission's own cost per unary RPC, as grpc
// drives it: the tap when the headers arrive, the handler's hold, the
// message's charge and its decoded cost (an Append of one 1 KiB record),
// then the stream's end and the release of its charge.
//
//	go test -run '^$' -bench AdmissionPerRPC -benchmem ./internal/server
func BenchmarkAdmissionPerRPC(b *testing.B) {
	a := newAdmission(Config{RecvTimeout: time.Hour}.withDefaults(), nil, nil)
	req := tledger.AppendRequest("bench", "x")
	req.Records[0].Content = string(make([]byte, 1024))
	info := &tap.Info{FullMethodName: appendMethod}
	b.ReportAllocs()
	for b.Loop() {
		stream, end := context.WithCancel(context.Background())
		ctx, err := a.tap(stream, info)
		if err != nil {
			b.Fatal(err)
		}
		r := reservationOf(ctx)
		if !r.enter() {
			b.Fatal("the stream ended before its handler ran")
		}
		err = a.recv(ctx, r, req, false, func(m any) error {
			_ = m.(*rolloutv1.AppendRequest)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		r.exit()
		end()
		for a.budget.inUse() != 0 {
			runtime.Gosched() // the stream's end releases its charge on a goroutine of its own
		}
	}
}

// BenchmarkDecodedCost is the size of a decoded Append of one 1 KiB record,
// which admission charges (decodedCost).
func BenchmarkDecodedCost(b *testing.B) {
	req := tledger.AppendRequest("bench", "x")
	req.Records[0].Content = string(make([]byte, 1024))
	b.ReportAllocs()
	for b.Loop() {
		if decodedCost(req) <= 0 {
			b.Fatal("no cost")
		}
	}
}
