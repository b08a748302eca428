package server

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/instrumented"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// Benchmarks of one Append over a real gRPC connection (loopback TCP), on
// a Server built by New as rolloutd serve builds it: its interceptors,
// admission, metrics registry, a JSON logger at Info (the default level)
// and an instrumented store, here over memstore, so that what is measured
// is rolloutd's own work around the write.
//
//	go test -run '^$' -bench AppendGRPC -benchmem ./internal/server
//
// cpu-ns/op is the process's user+system CPU per append: client and server
// together, as both run in this process. log-lines/op counts the lines the
// server wrote.

// countingSink is a zap sink that discards lines and counts them.
type countingSink struct{ lines atomic.Int64 }

func (c *countingSink) Write(p []byte) (int, error) { c.lines.Add(1); return len(p), nil }
func (c *countingSink) Sync() error                 { return nil }

// benchGRPCServer serves a production-configured Server on loopback TCP
// and returns a client connected to it and the log sink.
func benchGRPCServer(b *testing.B, level zapcore.Level) (rolloutv1.RolloutServiceClient, *countingSink) {
	b.Helper()
	sink := &countingSink{}
	enc := zap.NewProductionEncoderConfig()
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), sink, level))
	reg := prometheus.NewRegistry()
	s, err := New(Config{
		Store:      instrumented.New(memstore.New(), instrumented.NewMetrics(reg)),
		Logger:     log,
		Registerer: reg,
	})
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		if err := <-served; err != nil {
			b.Errorf("Serve: %v", err)
		}
	})
	return rolloutv1.NewRolloutServiceClient(conn), sink
}

// cpuTime is the process's user+system CPU so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchRecord is a 1 KiB record, as the load sends.
func benchRecord(id string) *rolloutv1.Record {
	return &rolloutv1.Record{Id: id, RolloutId: "r-" + id, Content: strings.Repeat("x", 1024)}
}

// BenchmarkAppendGRPC: one record per Append; serial is one client on one
// shard, parallel is GOMAXPROCS×8 clients over 100 shards. The log level
// is Info, the default, and Warn, to show what the Info lines cost.
func BenchmarkAppendGRPC(b *testing.B) {
	for _, level := range []zapcore.Level{zapcore.InfoLevel, zapcore.WarnLevel} {
		b.Run("log="+level.String(), func(b *testing.B) { benchAppendGRPC(b, level) })
	}
}

func benchAppendGRPC(b *testing.B, level zapcore.Level) {
	b.Run("serial", func(b *testing.B) {
		client, sink := benchGRPCServer(b, level)
		ctx := context.Background()
		b.ReportAllocs()
		var n int
		lines, cpu := sink.lines.Load(), cpuTime(b)
		for b.Loop() {
			n++
			req := &rolloutv1.AppendRequest{Shard: "bench/serial", Records: []*rolloutv1.Record{benchRecord(fmt.Sprintf("r%d", n))}}
			if _, err := client.Append(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(sink.lines.Load()-lines)/float64(b.N), "log-lines/op")
	})
	b.Run("parallel", func(b *testing.B) {
		client, sink := benchGRPCServer(b, level)
		ctx := context.Background()
		var next atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(8)
		lines, cpu := sink.lines.Load(), cpuTime(b)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n := next.Add(1)
				req := &rolloutv1.AppendRequest{Shard: fmt.Sprintf("bench/s%03d", n%100), Records: []*rolloutv1.Record{benchRecord(fmt.Sprintf("r%d", n))}}
				if _, err := client.Append(ctx, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.StopTimer()
		b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(sink.lines.Load()-lines)/float64(b.N), "log-lines/op")
	})
}
