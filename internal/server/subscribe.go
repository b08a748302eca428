package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/consumer"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/subscribe"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// Subscribe streams the records of every shard under the request's prefix
// (internal/shard/subscribe): a started message once the starting
// positions are fixed, then each shard's batches in seq order, shards
// interleaved, and a message for each deleted shard. It runs until the
// client cancels it, its permission is revoked (PERMISSION_DENIED, as a
// following Scan), or the server shuts down: UNAVAILABLE with reason
// SCAN_INTERRUPTED, after which the client resumes with positions set to
// the cursors it received.
//
// Every message is charged to the response budget before it is encoded,
// as a Scan's batches are; subscriptions send smaller batches than Scan
// (subscribeBatchBytes), since one stream carries many shards.
func (s *service) Subscribe(req *rolloutv1.SubscribeRequest, stream grpc.ServerStreamingServer[rolloutv1.SubscribeResponse]) error {
	ctx := stream.Context()
	if s.subscribe == nil {
		return status.Error(codes.Unimplemented, "this server does not serve subscriptions")
	}
	project, err := projection(req.GetFields())
	if err != nil {
		return toStatus(ctx, err)
	}
	start, err := subscribeStart(req.GetStart())
	if err != nil {
		return toStatus(ctx, err)
	}
	call := callFrom(ctx)
	batchBytes, keep := subscribeSizes(ctx)
	opts := shard.ScanOptions{
		Filter:     recordFilter(req.GetRolloutId(), req.GetRole(), req.IncludeInTraining),
		Project:    project,
		BatchBytes: batchBytes,
	}
	// Without a filter or a projection, records go out as stored.
	opts.Raw = opts.Filter == nil && project == nil
	r := subscribe.Request{
		Prefix:    req.GetPrefix(),
		Start:     start,
		Consumer:  req.GetConsumer(),
		Positions: req.GetPositions(),
		Member:    req.GetMember(),
		Members:   req.GetMembers(),
		Scan:      opts,
	}
	err = s.subscribe.Subscribe(ctx, r, func(m subscribe.Message) error {
		if err := sendSubscribed(ctx, stream, m, opts.Raw, keep); err != nil {
			return err
		}
		n := len(m.Batch.Records) + len(m.Batch.Raw)
		call.records.Add(int64(n))
		s.metrics.subscribedRecords.Add(float64(n))
		return nil
	})
	if ctx.Err() != nil && (err == nil || errors.Is(err, ctx.Err())) {
		if st, ok := status.FromError(context.Cause(ctx)); ok && st.Code() != codes.OK {
			return st.Err() // revoked (see guard.stream)
		}
		// The client went away, or the server is shutting down.
		f := failure{code: codes.Unavailable, msg: fmt.Sprintf("subscription to prefix %q ended (%v)", req.GetPrefix(), context.Cause(ctx))}
		return f.interrupted().err()
	}
	return classify(ctx, err, false).interrupted().err()
}

// interrupted makes f, the failure of a Subscribe, say that the client
// resumes from the cursors it received when a new subscription gets past
// the cause.
func (f failure) interrupted() failure {
	switch f.code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		f.reason = rolloutv1.ErrorReason_SCAN_INTERRUPTED
		f.hint += "; resume with positions set to the cursors received"
	}
	return f
}

// subscribeStart maps the request's start to the engine's.
func subscribeStart(s rolloutv1.SubscribeStart) (subscribe.Start, error) {
	switch s {
	case rolloutv1.SubscribeStart_SUBSCRIBE_START_UNSPECIFIED:
		return subscribe.StartDefault, nil
	case rolloutv1.SubscribeStart_SUBSCRIBE_START_EARLIEST:
		return subscribe.StartEarliest, nil
	case rolloutv1.SubscribeStart_SUBSCRIBE_START_LATEST:
		return subscribe.StartLatest, nil
	case rolloutv1.SubscribeStart_SUBSCRIBE_START_CONSUMER:
		return subscribe.StartConsumer, nil
	}
	return 0, &validate.FieldError{Field: "start", Rule: "must be a SubscribeStart", Detail: fmt.Sprintf("got %d", s)}
}

// A subscription's sizes: subscribeBatchBytes bounds one message's
// records (unless a single record is larger), a quarter of a Scan's, since
// one stream interleaves many shards; subscribeKeep is what each message
// is charged beside its bytes while it waits in the transport: a read in
// flight (subscribe.Options.ReadBytes' default).
const (
	subscribeBatchBytes = 256 << 10
	subscribeKeep       = 1 << 20
)

// subscribeSizes are subscribeBatchBytes and subscribeKeep, each at most
// an eighth of a connection's share of the budget, as scanSizes.
func subscribeSizes(ctx context.Context) (batchBytes int, keep int64) {
	batchBytes, keep = subscribeBatchBytes, subscribeKeep
	if r := reservationOf(ctx); r != nil {
		share := r.budget.connLimit / 8
		batchBytes, keep = int(min(int64(batchBytes), share)), min(keep, share)
	}
	return batchBytes, keep
}

// sendSubscribed sends one message of a subscription, charged to the
// budget before it is encoded (as sendBatch). Raw batches go out as the
// records' stored encodings.
func sendSubscribed(ctx context.Context, stream grpc.ServerStreamingServer[rolloutv1.SubscribeResponse], m subscribe.Message, raw bool, keep int64) error {
	var msg any
	var size int
	batch := !m.Started && !m.Deleted
	switch {
	case m.Started:
		resp := &rolloutv1.SubscribeResponse{Started: &rolloutv1.SubscribeStarted{ConsumerGeneration: m.ConsumerGeneration}}
		msg, size, keep = resp, proto.Size(resp), 0
	case m.Deleted:
		resp := &rolloutv1.SubscribeResponse{Shard: m.Shard, Cursor: m.Batch.Cursor, ShardDeleted: true}
		msg, size, keep = resp, proto.Size(resp), 0
	case raw:
		size = subscribeFrameSize(m.Shard, m.Batch.Raw, m.Batch.Cursor)
	default:
		resp := &rolloutv1.SubscribeResponse{Shard: m.Shard, Records: m.Batch.Records, Cursor: m.Batch.Cursor}
		msg, size = resp, proto.Size(resp)
	}
	rc, err := reserveSend(ctx, int64(size)+keep)
	if err != nil {
		return err
	}
	if batch && raw {
		msg = newSubscribeFrame(m.Shard, m.Batch.Raw, m.Batch.Cursor)
	}
	if rc != nil {
		msg = &chargedReply{msg: msg, rc: rc, keep: keep}
	}
	err = stream.SendMsg(msg)
	if rc != nil {
		rc.abandon() // if the codec did not take it
	}
	return err
}

// consumerPositions loads consumers' positions from store for
// subscriptions.
func consumerPositions(store *consumer.Store) subscribe.ConsumerPositions {
	return func(ctx context.Context, prefix, name string) (map[string]uint64, uint64, bool, error) {
		c, err := store.Load(ctx, consumer.Key{Prefix: prefix, Name: name})
		switch {
		case errors.Is(err, consumer.ErrNotFound):
			return nil, 0, false, nil
		case err != nil:
			return nil, 0, false, err
		}
		return c.Positions, c.Generation, true, nil
	}
}
