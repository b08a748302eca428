package server

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

// accessLog times every unary RPC for the latency histograms, answers its
// error (see answer), and logs it through a sampled logger: per second, the
// first 10 lines of each message and level, then one in 100; a failure's
// line that carries a client's dropped lines is never sampled out (see
// checkRPCLine). Failures that point at the server (Internal, DataLoss,
// Unknown) are logged at Warn.
//
// Every line names the caller (identity under mTLS, peer address) and the
// RPC's request id. It runs before the guard, so that refusals are logged
// too; every string the client chose is cut to a bound (clientString).
func (s *Server) accessLog(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	c := callFrom(ctx)
	method := path.Base(info.FullMethod)
	resp, err := handler(ctx, req)
	err = s.answer(ctx, c, method, err)
	elapsed := time.Since(start)
	code := status.Code(err)
	s.metrics.rpcDuration.WithLabelValues(method, code.String()).Observe(elapsed.Seconds())
	s.metrics.observeErrorReason(method, err)

	if ce, extra := s.checkRPCLine(ctx, code); ce != nil {
		fields := append(s.rpcFields(ctx, c, method), zap.String("code", code.String()), zap.Duration("duration", elapsed))
		fields = append(fields, requestFields(req)...)
		writeRPCLine(ce, code, fields, extra, err)
	}
	return resp, err
}

// streamLog is accessLog for streaming RPCs. For RolloutService's (Scan),
// it logs the start, once the request has arrived, and the end with what
// was sent, and times it under its method label; other streams (health
// Watch, reflection) are only answered.
func (s *Server) streamLog(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	ctx := ss.Context()
	c := callFrom(ctx)
	method := path.Base(info.FullMethod)
	if !strings.HasPrefix(info.FullMethod, rolloutPrefix) {
		return s.answer(ctx, c, method, handler(srv, ss))
	}
	ls := &loggedStream{ServerStream: ss, s: s, call: c, method: method}
	err := s.answer(ctx, c, method, handler(srv, ls))
	elapsed := time.Since(start)
	code := status.Code(err)
	s.metrics.rpcDuration.WithLabelValues(method, code.String()).Observe(elapsed.Seconds())
	s.metrics.observeErrorReason(method, err)

	if ce, extra := s.checkRPCLine(ctx, code); ce != nil {
		fields := append(s.rpcFields(ctx, c, method), zap.String("code", code.String()), zap.Duration("duration", elapsed))
		fields = append(fields, ls.request()...)
		fields = append(fields, zap.Int64("records_sent", c.records.Load()), zap.Int64("bytes_sent", c.bytesSent.Load()))
		writeRPCLine(ce, code, fields, extra, err)
	}
	return err
}

// loggedStream logs the start of a stream when its request arrives, before
// the guard decides on it.
type loggedStream struct {
	grpc.ServerStream
	s      *Server
	call   *rpcCall
	method string

	mu  sync.Mutex // the handler's goroutine receives; streamLog reads at the end
	req []zap.Field
}

func (l *loggedStream) RecvMsg(m any) error {
	if err := l.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	l.mu.Lock()
	first := l.req == nil
	if first {
		l.req = requestFields(m)
	}
	req := l.req
	l.mu.Unlock()
	if !first {
		return nil
	}
	if ce := l.s.access.Check(zap.InfoLevel, "rpc started"); ce != nil {
		ce.Write(append(l.s.rpcFields(l.Context(), l.call, l.method), req...)...)
	}
	return nil
}

// request is the log fields of the stream's request, nil before it arrived.
func (l *loggedStream) request() []zap.Field {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.req
}

// rpcFields name an RPC and its caller in a log line.
func (s *Server) rpcFields(ctx context.Context, c *rpcCall, method string) []zap.Field {
	fields := make([]zap.Field, 0, 12)
	fields = append(fields, zap.String("method", method), zap.String("request_id", c.id))
	if id := peerIdentity(ctx); id != "" {
		fields = append(fields, clientString("identity", id))
	}
	return append(fields, zap.String("peer", peerAddr(ctx)))
}

// requestFields are the log fields of a RolloutService request, every
// string cut to its bound.
func requestFields(req any) []zap.Field {
	var fields []zap.Field
	if r, ok := req.(interface{ GetShard() string }); ok {
		fields = append(fields, clientString("shard", r.GetShard()))
	}
	if r, ok := req.(interface{ GetId() string }); ok {
		fields = append(fields, clientString("id", r.GetId()))
	}
	// An Append's own request_id (AIP-155) is the client's; request_id
	// names the RPC.
	if r, ok := req.(interface{ GetRequestId() string }); ok && r.GetRequestId() != "" {
		fields = append(fields, clientString("append_request_id", r.GetRequestId()))
	}
	switch r := req.(type) {
	case *rolloutv1.AppendRequest:
		fields = append(fields, zap.Int("records", len(r.GetRecords())))
	case *rolloutv1.ScanRequest:
		fields = append(fields, zap.Uint64("after_seq", r.GetAfterSeq()), zap.Bool("follow", r.GetFollow()))
		if r.GetLimit() != 0 {
			fields = append(fields, zap.Uint32("limit", r.GetLimit()))
		}
		if r.GetRolloutId() != "" {
			fields = append(fields, clientString("rollout_id", r.GetRolloutId()))
		}
	case *rolloutv1.SubscribeRequest:
		fields = append(fields, clientString("prefix", r.GetPrefix()), zap.String("start", r.GetStart().String()),
			zap.Uint32("member", r.GetMember()), zap.Uint32("members", r.GetMembers()), zap.Int("positions", len(r.GetPositions())))
		if r.GetConsumer() != "" {
			fields = append(fields, clientString("consumer", r.GetConsumer()))
		}
	}
	return fields
}

// checkRPCLine decides whether an RPC's access-log line is written: "rpc",
// or "rpc failed" (Warn when it points at the server) within the client's
// error-line rate (errlog.go), then the level and the sampler. It returns
// nil when the line is dropped, so that a sampled-out call, nearly every
// call under load, builds none of its fields; else the entry to write and
// the error log's fields to add.
func (s *Server) checkRPCLine(ctx context.Context, code codes.Code) (*zapcore.CheckedEntry, []zap.Field) {
	if code == codes.OK {
		return s.access.Check(zap.InfoLevel, "rpc"), nil
	}
	ok, extra := s.errLog.allow(ClientOf(ctx))
	if !ok {
		return nil, nil
	}
	log := s.access
	if len(extra) > 0 {
		// The line carries counts of dropped lines, which the error log
		// has reset: sampled out, they would be lost. The error-line
		// rate bounds these lines.
		log = s.accessAll
	}
	switch code {
	case codes.Internal, codes.DataLoss, codes.Unknown:
		return log.Check(zap.WarnLevel, "rpc failed"), extra
	default:
		return log.Check(zap.InfoLevel, "rpc failed"), extra
	}
}

// writeRPCLine writes the access-log line ce with fields; a failed RPC's
// line adds the error log's fields and the status message.
func writeRPCLine(ce *zapcore.CheckedEntry, code codes.Code, fields, extra []zap.Field, err error) {
	if code != codes.OK {
		fields = append(append(fields, extra...), errorField(err))
	}
	ce.Write(fields...)
}

// answer turns a handler's error into the status the client gets, on every
// path: handlers, the guard and the recovery of panics all run inside the
// interceptor that calls it.
//
// A failure whose text may carry the server's internals (an
// *internalError: Internal, DataLoss, storage-caused Unavailable) is
// answered with a generic text naming the RPC's request id, keeping its
// ErrorInfo and RetryInfo, and its text is logged under that id, within
// the client's error-line rate (errlog.go): the id finds it unless that
// client's lines were being dropped, which the log then says. An error that is not a gRPC status (a
// handler that skipped toStatus) is classified first, so that its text does
// not reach the client as Unknown.
func (s *Server) answer(ctx context.Context, c *rpcCall, method string, err error) error {
	if err == nil {
		return nil
	}
	var ie *internalError
	if !errors.As(err, &ie) {
		if _, ok := status.FromError(err); ok {
			return err
		}
		if err = toStatus(ctx, err); !errors.As(err, &ie) {
			return err
		}
	}
	lvl := zap.ErrorLevel
	if ie.f.code == codes.Unavailable {
		lvl = zap.WarnLevel
	}
	if ok, extra := s.errLog.allow(ClientOf(ctx)); ok {
		fields := append(s.rpcFields(ctx, c, method), zap.String("code", ie.f.code.String()), boundedString("error", ie.detail(), maxLoggedError))
		// The stack would be this function's, the same on every line.
		s.log.WithOptions(zap.AddStacktrace(zap.FatalLevel)).Log(lvl, "rpc error withheld from the client", append(fields, extra...)...)
	}
	return ie.f.status(c.id).Err()
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
			resp, err = nil, s.panicked(ctx, info.FullMethod, p)
		}
	}()
	return handler(ctx, req)
}

// recoverStream is recoverUnary for streaming RPCs. It must be the
// innermost stream interceptor: cancelOnShutdown may run the handler in a
// goroutine of its own, and a panic is recovered only in its goroutine.
func (s *Server) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = s.panicked(ss.Context(), info.FullMethod, p)
		}
	}()
	return handler(srv, ss)
}

// panicked logs a handler's panic with its stack under the RPC's request
// id, and returns the Internal status naming that id.
func (s *Server) panicked(ctx context.Context, method string, p any) error {
	s.metrics.panics.Inc()
	id := callFrom(ctx).id
	s.log.Error("rpc handler panicked", zap.String("method", path.Base(method)), zap.String("request_id", id),
		boundedString("panic", fmt.Sprint(p), maxLoggedError), zap.StackSkip("stack", 2))
	return status.Error(codes.Internal, fmt.Sprintf("internal error in %s; the server logged the details under request id %s", path.Base(method), id))
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
//
// A server-streaming handler (Scan, a health Watch) reads its one request
// first and then watches its context, so it runs in the stream's own
// goroutine: a follow Scan costs one goroutine, not two. One whose request
// never arrives is ended by --recv-timeout, or by Stop.
func (s *Server) cancelOnShutdown(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	stop := context.AfterFunc(s.streams, cancel)
	defer stop()
	if !info.IsClientStream {
		return handler(srv, &serverStream{ServerStream: ss, ctx: ctx})
	}
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
