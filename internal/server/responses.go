package server

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Responses count against the budget like requests, with the same shares,
// from before the server builds one until the transport has written it.
//
//  1. Before a handler builds its response it charges what building may
//     hold (responseBound: twice the largest response the request can
//     have, for the bytes read from the store and their decoded copy; for a
//     Get of a record the reader's cache knows, twice its size), and
//     waits up to admissionWait for it to fit, or is refused with
//     BACKPRESSURE and RetryInfo. A Scan charges each batch before it
//     encodes it (reserveSend).
//  2. The charge travels with the response (chargedReply) to the codec,
//     which encodes it into a buffer of grpc-go's mem package and hands the
//     charge to it, trued up to the bytes encoded. The buffer's pool
//     (chargedPool) releases the charge when the buffer's last reference
//     is freed: in grpc-go v1.85, serverStream.SendMsg frees its own
//     reference once http2Server.write has queued the data with one of its
//     own (internal/transport/http2_server.go), and the loopy writer frees
//     that one when the message is written out, or the stream is cleaned
//     up (internal/transport/controlbuf.go processData,
//     cleanupStreamHandler).
//  3. When the connection ends, its loopy writer does not free what its
//     streams still have queued (controlbuf.go: finish frees only what is
//     still in the control buffer), so the connection's end (a
//     stats.ConnEnd) releases every charge its responses still hold.
//  4. A response not written within the send timeout of being handed over
//     means its client is not reading: grpc-go has no API to reset one
//     server stream, so the server closes the connection, which frees the
//     response and releases its charge.
//
// A charge that never reaches the codec (the handler failed, or the stream
// ended first) is released with the stream's reservation.

// DefaultSendTimeout is how long a response may wait for its client to
// take it.
const DefaultSendTimeout = 30 * time.Second

// responseBuildFactor is what building a response holds per byte of it:
// the bytes read from the store and the decoded records. The encoded copy
// is made after the handler returns, when the bytes read are garbage.
const responseBuildFactor = 2

type chargeState int

const (
	chargeHeld     chargeState = iota // by the handler, until the codec takes it
	chargeHanded                      // to an encoded response in the transport
	chargeReleased                    // given back to the budget
)

// respCharge is one response's charge against the budget.
type respCharge struct {
	a        *admission
	conn     *connUsage
	identity string
	r        *reservation // the stream's, while the charge is held

	mu    sync.Mutex
	n     int64       // guarded by mu
	state chargeState // guarded by mu
	timer *time.Timer // guarded by mu: the send timeout, once handed
}

// reserveResponse charges n bytes for a response about to be built on r's
// stream, waiting up to admissionWait for them to fit. The error is an
// *OverBudgetError, counted.
func (a *admission) reserveResponse(ctx context.Context, r *reservation, n int64) (*respCharge, error) {
	if n > 0 {
		if err := a.budget.chargeWait(ctx, r.conn, r.identity, n, admissionWait); err != nil {
			a.countRefusal(err)
			return nil, err
		}
	}
	rc := &respCharge{a: a, conn: r.conn, identity: r.identity, r: r, n: n}
	if !r.holdResponse(rc) {
		rc.release() // the stream has ended
	}
	return rc, nil
}

// reserveSend charges n bytes for a message a stream handler is about to
// build and send; nil without an admitted stream (no budget to charge).
func reserveSend(ctx context.Context, n int64) (*respCharge, error) {
	r := reservationOf(ctx)
	if r == nil {
		return nil, nil
	}
	return r.a.reserveResponse(ctx, r, n)
}

// hand gives the charge to an encoded response of size bytes in the
// transport, keeping keep bytes more (what its sender still holds beside
// it), and starts the send timeout. False means the charge was released
// already (the stream ended): the response goes uncharged.
func (rc *respCharge) hand(size, keep int64) bool {
	if rc.r != nil {
		rc.r.unholdResponse(rc)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.state != chargeHeld {
		return false
	}
	rc.state = chargeHanded
	rc.a.budget.force(rc.conn, rc.identity, size+keep-rc.n)
	rc.n = size + keep
	rc.timer = time.AfterFunc(rc.a.sendTimeout, rc.expire)
	if !rc.conn.track(rc) {
		// The connection has ended: nothing will free the response.
		rc.releaseLocked()
	}
	return true
}

// abandon releases the charge unless it was handed to the transport: for
// a sender whose message may not have reached the codec.
func (rc *respCharge) abandon() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.state == chargeHeld {
		rc.releaseLocked()
	}
}

// release gives the charge back; it is idempotent.
func (rc *respCharge) release() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.releaseLocked()
}

func (rc *respCharge) releaseLocked() {
	if rc.state == chargeReleased {
		return
	}
	if rc.timer != nil {
		rc.timer.Stop()
	}
	rc.state = chargeReleased
	_ = rc.a.budget.charge(rc.conn, rc.identity, -rc.n)
	rc.n = 0
	rc.conn.untrack(rc)
	if rc.r != nil {
		rc.r.unholdResponse(rc)
	}
}

// expire runs when the response was not written within the send timeout.
func (rc *respCharge) expire() {
	rc.mu.Lock()
	handed, n := rc.state == chargeHanded, rc.n
	rc.mu.Unlock()
	if !handed {
		return
	}
	rc.a.sendTimeouts.Inc()
	if rc.conn.close == nil {
		// Which connection it is is unknown: its charge stays until the
		// transport frees the response or the connection ends.
		rc.a.log.Warn("a response was not taken within the send timeout; its connection is unknown and stays open",
			zap.String("client", rc.identity), zap.Int64("bytes", n), zap.Duration("send_timeout", rc.a.sendTimeout))
		return
	}
	rc.a.log.Warn("a response was not taken within the send timeout; closing its connection",
		zap.String("client", rc.identity), zap.Int64("bytes", n), zap.Duration("send_timeout", rc.a.sendTimeout))
	_ = rc.conn.close()
	rc.release()
}

// track adds a handed charge to the connection's, to be released when it
// ends; false if it has ended.
func (c *connUsage) track(rc *respCharge) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return false
	}
	if c.pending == nil {
		c.pending = map[*respCharge]struct{}{}
	}
	c.pending[rc] = struct{}{}
	return true
}

func (c *connUsage) untrack(rc *respCharge) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, rc)
}

// end releases the charges of the responses the ended connection's
// transport still held.
func (c *connUsage) end() {
	c.mu.Lock()
	c.ended = true
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	for rc := range pending {
		rc.release()
	}
}

// chargedReply is a response with its charge, on its way to the codec.
type chargedReply struct {
	msg any // a proto.Message or a *scanFrame
	rc  *respCharge
	// keep is charged beside the encoded bytes while they wait in the
	// transport: what the sender holds for its next message.
	keep int64
}

// marshal encodes the reply into a buffer that holds its charge.
func (cr *chargedReply) marshal(codec passthroughCodec) (mem.BufferSlice, error) {
	switch m := cr.msg.(type) {
	case *scanFrame:
		if mem.IsBelowBufferPoolingThreshold(len(m.wire)) || !cr.rc.hand(int64(len(m.wire)), cr.keep) {
			cr.rc.release()
			return mem.BufferSlice{mem.SliceBuffer(m.wire)}, nil
		}
		return mem.BufferSlice{mem.NewBuffer(&m.wire, &chargedPool{rc: cr.rc})}, nil
	case proto.Message:
		size := proto.Size(m)
		if mem.IsBelowBufferPoolingThreshold(size) || !cr.rc.hand(int64(size), cr.keep) {
			cr.rc.release()
			return codec.CodecV2.Marshal(m)
		}
		pool := mem.DefaultBufferPool()
		buf := pool.Get(size)
		out, err := proto.MarshalOptions{}.MarshalAppend((*buf)[:0], m)
		if err != nil {
			pool.Put(buf)
			cr.rc.release()
			return nil, err
		}
		*buf = out
		return mem.BufferSlice{mem.NewBuffer(buf, &chargedPool{rc: cr.rc, recycle: true})}, nil
	}
	cr.rc.release()
	return codec.CodecV2.Marshal(cr.msg)
}

// chargedPool is the pool of one charged buffer: grpc-go puts the buffer
// back when its last reference is freed, which releases the charge.
type chargedPool struct {
	rc      *respCharge
	recycle bool // the buffer came from the default pool
}

var _ mem.BufferPool = (*chargedPool)(nil)

func (p *chargedPool) Get(n int) *[]byte { return mem.DefaultBufferPool().Get(n) }

func (p *chargedPool) Put(b *[]byte) {
	p.rc.release()
	if p.recycle {
		mem.DefaultBufferPool().Put(b)
	}
}
