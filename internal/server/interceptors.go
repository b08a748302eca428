package server

import (
	"context"
	"fmt"
	"path"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// accessLog times every unary RPC for the latency histograms and logs it
// through a sampled logger: per second, the first 10 lines of each message
// and level, then one in 100. Failures that point at the server (Internal,
// DataLoss, Unknown) are logged at Warn.
func (s *Server) accessLog(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	elapsed := time.Since(start)
	code := status.Code(err)
	method := path.Base(info.FullMethod)
	s.metrics.rpcDuration.WithLabelValues(method, code.String()).Observe(elapsed.Seconds())

	fields := []zap.Field{zap.String("method", method), zap.String("code", code.String()), zap.Duration("duration", elapsed)}
	if r, ok := req.(interface{ GetShard() string }); ok {
		fields = append(fields, zap.String("shard", r.GetShard()))
	}
	switch code {
	case codes.OK:
		s.access.Info("rpc", fields...)
	case codes.Internal, codes.DataLoss, codes.Unknown:
		s.access.Warn("rpc failed", append(fields, zap.Error(err))...)
	default:
		s.access.Info("rpc failed", append(fields, zap.Error(err))...)
	}
	return resp, err
}

// defaultDeadline gives an RPC that carries no deadline the server's
// default, so that no request can hold a writer pin forever.
func (s *Server) defaultDeadline(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if _, ok := ctx.Deadline(); ok || s.cfg.DefaultDeadline <= 0 {
		return handler(ctx, req)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DefaultDeadline)
	defer cancel()
	return handler(ctx, req)
}

// recoverUnary turns a handler's panic into Internal, logging it with its
// stack: no panic reaches the client or takes the process down.
func (s *Server) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, s.panicked(info.FullMethod, p)
		}
	}()
	return handler(ctx, req)
}

// recoverStream is recoverUnary for streaming RPCs.
func (s *Server) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = s.panicked(info.FullMethod, p)
		}
	}()
	return handler(srv, ss)
}

func (s *Server) panicked(method string, p any) error {
	s.metrics.panics.Inc()
	s.log.Error("rpc handler panicked", zap.String("method", method), zap.Any("panic", p), zap.StackSkip("stack", 2))
	return status.Error(codes.Internal, fmt.Sprintf("internal error in %s (the server logged it)", path.Base(method)))
}

// cancelOnShutdown ends every streaming RPC when Shutdown cancels the
// server's stream context, before GracefulStop: a long-lived stream (a
// health Watch, a reflection session, later Scan/Tail) must not hold the
// graceful stop open.
//
// The stream's context is cancelled, which ends a handler that watches it.
// A handler blocked in RecvMsg does not watch it, so the stream is answered
// Unavailable at once; finishing the stream makes that RecvMsg fail, and the
// handler returns soon after.
func (s *Server) cancelOnShutdown(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	stop := context.AfterFunc(s.streams, cancel)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- handler(srv, &serverStream{ServerStream: ss, ctx: ctx}) }()
	select {
	case err := <-errc:
		return err
	case <-s.streams.Done():
	}
	// A handler that watches its context (Scan) answers with where to
	// resume; give it a moment before answering for it.
	select {
	case err := <-errc:
		return err
	case <-time.After(streamShutdownGrace):
		return status.Error(codes.Unavailable, "server shutting down; reconnect to another instance")
	}
}

// streamShutdownGrace is how long a cancelled stream handler gets to answer
// for itself at shutdown.
const streamShutdownGrace = 200 * time.Millisecond

// serverStream is a grpc.ServerStream with its own context.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }
