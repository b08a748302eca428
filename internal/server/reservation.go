package server

import (
	"context"
	"sync"
	"time"
)

// reservation is one stream's charge against the budget.
type reservation struct {
	a        *admission
	budget   *budget
	conn     *connUsage
	identity string
	overhead int64 // the stream's window and headers
	cancel   context.CancelCauseFunc
	timer    *time.Timer // the receive timeout; stopped when the message is in
	unwatch  func() bool // stops the context.AfterFunc of streamEnded

	mu      sync.Mutex
	held    int64 // charged
	holds   int   // the stream until its context is done, the handler while it runs
	arrived bool  // a request message was received
	message bool  // a message's charge is held (from reserveMessage to received)
	// response and responses are the charges of responses being built,
	// not yet handed to the transport: released with the last hold. A
	// unary RPC builds one, which response holds without a map.
	response  *respCharge
	responses map[*respCharge]struct{}
}

// holdResponse keeps rc with the stream until the codec takes it; false
// means the stream has ended.
func (r *reservation) holdResponse(rc *respCharge) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holds == 0 {
		return false
	}
	if r.response == nil {
		r.response = rc
		return true
	}
	if r.responses == nil {
		r.responses = map[*respCharge]struct{}{}
	}
	r.responses[rc] = struct{}{}
	return true
}

func (r *reservation) unholdResponse(rc *respCharge) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.response == rc {
		r.response = nil
		return
	}
	delete(r.responses, rc)
}

// reserveMessage charges a message of up to n bytes before it is read,
// waiting up to admissionWait for it to fit. Its caller holds r (enter). A charge already held (a
// client stream's earlier message, kept) covers it.
func (r *reservation) reserveMessage(ctx context.Context, n int64) error {
	r.mu.Lock()
	covered := r.message || r.held >= n+r.overhead
	r.mu.Unlock()
	if covered {
		return nil
	}
	if err := r.budget.chargeWait(ctx, r.conn, r.identity, n, admissionWait); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held += n
	r.message = true
	return nil
}

// received stops the receive timer and makes the charge cost (plus the
// stream's overhead); keep makes it no less than it is. A larger charge
// that does not fit is refused, and the charge stays.
func (r *reservation) received(cost int64, keep bool) error {
	r.timer.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.arrived = true
	r.message = keep
	n := cost + r.overhead
	if cost < 0 || keep && n < r.held {
		return nil
	}
	if err := r.budget.charge(r.conn, r.identity, n-r.held); err != nil {
		return err
	}
	r.held = n
	return nil
}

// timeout counts the refusal and cancels the stream if its message has not
// arrived. The count comes first: whoever sees the stream end (its client,
// a scrape, a test) must find it counted.
func (r *reservation) timeout() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.arrived || r.holds == 0 {
		return
	}
	r.a.refused.WithLabelValues(refusedRecvTimeout).Inc()
	r.cancel(errRecvTimeout)
}

// enter holds the charge for a handler; false means the stream has ended
// and the charge is released.
func (r *reservation) enter() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holds == 0 {
		return false
	}
	r.holds++
	return true
}

// exit ends a handler's hold.
func (r *reservation) exit() { r.drop() }

// streamEnded ends the stream's hold, when its context is done.
func (r *reservation) streamEnded() {
	r.timer.Stop()
	r.drop()
}

// drop ends one hold and releases the charge with the last.
func (r *reservation) drop() {
	r.mu.Lock()
	r.holds--
	if r.holds > 0 {
		r.mu.Unlock()
		return
	}
	r.timer.Stop()
	r.unwatch()
	_ = r.budget.charge(r.conn, r.identity, -r.held)
	r.held = 0
	response, responses := r.response, r.responses
	r.response, r.responses = nil, nil
	r.mu.Unlock()
	if response != nil {
		response.release()
	}
	for rc := range responses {
		rc.release()
	}
}

type reservationKey struct{}

func reservationOf(ctx context.Context) *reservation {
	r, _ := ctx.Value(reservationKey{}).(*reservation)
	return r
}

// admittedContext is a stream's context as the tap returns it: it carries
// the reservation, and reports a stream cancelled by the receive timeout as
// past its deadline. The transport reads the stream's body under this
// context, and when it is done answers with its Err (grpc-go's
// serverStream.RecvMsg writes that status itself): DEADLINE_EXCEEDED, not
// CANCELLED, for a request that did not arrive in time.
type admittedContext struct {
	context.Context
	r *reservation
}

func (c *admittedContext) Value(key any) any {
	if key == (reservationKey{}) {
		return c.r
	}
	return c.Context.Value(key)
}

func (c *admittedContext) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == errRecvTimeout {
		return context.DeadlineExceeded
	}
	return err
}
