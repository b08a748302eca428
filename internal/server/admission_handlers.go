package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// registrar returns a grpc.ServiceRegistrar (with GetServiceInfo, for
// reflection) that registers services on g with every handler wrapped:
// every service on the server must be registered through it, or its
// requests' bodies go uncharged.
func (a *admission) registrar(g *grpc.Server) *admittedRegistrar {
	return &admittedRegistrar{Server: g, a: a}
}

type admittedRegistrar struct {
	*grpc.Server
	a *admission
}

// RegisterService registers impl under a copy of desc whose handlers are
// admitted.
func (r *admittedRegistrar) RegisterService(desc *grpc.ServiceDesc, impl any) {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		d.Methods[i] = grpc.MethodDesc{MethodName: m.MethodName, Handler: r.a.unaryHandler(m.Handler)}
	}
	d.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, sd := range desc.Streams {
		sd.Handler = r.a.streamHandler(sd.Handler, sd.ClientStreams)
		d.Streams[i] = sd
	}
	r.Server.RegisterService(&d, impl)
	r.a.admitted = append(r.a.admitted, desc.ServiceName)
}

// unaryHandler admits h's request: it charges the message before h's
// decoder reads it, and its decoded cost after. Then it charges what
// building the response may hold, and hands that charge to the response
// (responses.go).
func (a *admission) unaryHandler(h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		r := reservationOf(ctx)
		if r == nil {
			return h(srv, ctx, dec, interceptor)
		}
		if !r.enter() {
			return nil, status.FromContextError(context.Cause(ctx)).Err()
		}
		defer r.exit()
		var rc *respCharge
		reply, err := h(srv, ctx, func(m any) error {
			if err := a.recv(ctx, r, m, false, dec); err != nil {
				return err
			}
			var err error
			rc, err = a.reserveResponse(ctx, r, a.responseBound(m))
			return toStatus(ctx, err)
		}, interceptor)
		if rc == nil || err != nil || reply == nil {
			if rc != nil {
				rc.release()
			}
			return reply, err
		}
		return &chargedReply{msg: reply, rc: rc}, nil
	}
}

// streamHandler admits h's request messages. The charge follows the first
// one; a stream that may receive more (client streaming) keeps the
// message's charge, since each further message may be as large.
func (a *admission) streamHandler(h grpc.StreamHandler, clientStreams bool) grpc.StreamHandler {
	return func(srv any, ss grpc.ServerStream) error {
		r := reservationOf(ss.Context())
		if r == nil {
			return h(srv, ss)
		}
		if !r.enter() {
			return status.FromContextError(context.Cause(ss.Context())).Err()
		}
		defer r.exit()
		return h(srv, &admittedStream{ServerStream: ss, a: a, r: r, keep: clientStreams})
	}
}

// admittedStream admits the messages a stream handler receives.
type admittedStream struct {
	grpc.ServerStream
	a    *admission
	r    *reservation
	keep bool
}

func (s *admittedStream) RecvMsg(m any) error {
	return s.a.recv(s.Context(), s.r, m, s.keep, s.ServerStream.RecvMsg)
}

// recv receives m through read, charging its message first and its decoded
// cost after (see above). The error is a gRPC status.
func (a *admission) recv(ctx context.Context, r *reservation, m any, keep bool, read func(any) error) error {
	if err := r.reserveMessage(ctx, readCostFactor*a.maxMessage); err != nil {
		if ctx.Err() != nil {
			return a.recvFailed(ctx, err)
		}
		return a.refuse(ctx, err)
	}
	if err := read(m); err != nil {
		return a.recvFailed(ctx, err)
	}
	if err := r.received(decodedCost(m), keep); err != nil {
		return a.refuse(ctx, err)
	}
	return nil
}

// recvFailed is the error of a read that failed: the receive timeout's own
// when it was the cause.
func (a *admission) recvFailed(ctx context.Context, err error) error {
	if context.Cause(ctx) == errRecvTimeout {
		return status.Error(codes.DeadlineExceeded, fmt.Sprintf("%v: not within %s of its headers", errRecvTimeout, a.recvTimeout))
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return err
}
