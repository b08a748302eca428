package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/validate"
)

// Scan streams the shard's records after the request's cursor, filtered and
// projected, in batches that each carry the cursor to resume from. It reads
// from storage, never from a writer's memory, and sends one batch at a time:
// gRPC flow control holds a slow consumer's stream back without buffering
// more than a batch, and without touching the appends. A following Scan
// shares its shard's one reader with every other follower of the instance
// (internal/shard/follow), and costs no goroutine beyond its handler's.
func (s *service) Scan(req *rolloutv1.ScanRequest, stream grpc.ServerStreamingServer[rolloutv1.ScanResponse]) error {
	ctx := stream.Context()
	if err := validate.Shard(req.GetShard()); err != nil {
		return toStatus(ctx, err)
	}
	project, err := projection(req.GetFields())
	if err != nil {
		return toStatus(ctx, err)
	}
	call := callFrom(ctx)
	cursor := req.GetAfterSeq()
	batchBytes, keep := scanSizes(ctx)
	opts := shard.ScanOptions{
		AfterSeq:   req.GetAfterSeq(),
		Limit:      int(req.GetLimit()),
		Filter:     scanFilter(req),
		Follow:     req.GetFollow(),
		Notifier:   s.notifier,
		ReadBytes:  scanReadBytes,
		BatchBytes: batchBytes,
	}
	// Without a filter or a projection, records go out as stored. The
	// reader projects, so that it sizes batches by the bytes sent.
	opts.Raw = opts.Filter == nil && project == nil
	opts.Project = project
	scan := s.reader.Scan
	if opts.Follow && s.follow != nil {
		scan = s.follow.Scan
	}
	err = scan(ctx, req.GetShard(), opts, func(b shard.Batch) error {
		if err := sendBatch(ctx, stream, b, opts.Raw, keep); err != nil {
			return err
		}
		cursor = b.Cursor
		n := len(b.Records) + len(b.Raw)
		call.records.Add(int64(n))
		s.metrics.scannedRecords.Add(float64(n))
		return nil
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		if st, ok := status.FromError(context.Cause(ctx)); ok && st.Code() != codes.OK {
			// The stream was ended with an answer: its permission was
			// revoked (see guard.stream).
			return st.Err()
		}
		// The client went away, or the server is shutting down; either way
		// the cursor says where to pick up.
		f := failure{code: codes.Unavailable, msg: fmt.Sprintf("scan of shard %q ended (%v)", req.GetShard(), context.Cause(ctx)), hint: fmt.Sprintf("; resume with after_seq=%d", cursor)}
		return f.resumeAt(cursor).err()
	}
	f := classify(ctx, err, false)
	if errors.Is(err, shard.ErrShardNotFound) {
		// Only a Scan without follow meets it (a follower waits for the
		// first record), and there is no cursor to resume from.
		f.hint += "; it has never been written (a Scan with follow waits for its first record)"
		return f.err()
	}
	f.hint += fmt.Sprintf(" (resume with after_seq=%d)", cursor)
	return f.resumeAt(cursor).err()
}

// A Scan's sizes: scanReadBytes bounds one ranged read
// (shard.ScanOptions.ReadBytes), and scanBatchBytes one batch, unless a
// single record is larger. A scan holds two reads (one being delivered, the
// next read ahead) beside the batch it sends.
const (
	scanReadBytes  = 4 << 20
	scanBatchBytes = 1 << 20
)

// scanSizes are a Scan's batch bound and what each batch is charged beside
// its own bytes while it waits in the transport (the scan's read ahead):
// each at most an eighth of a connection's share of the budget, so that a
// batch always fits it.
func scanSizes(ctx context.Context) (batchBytes int, keep int64) {
	batchBytes, keep = scanBatchBytes, scanReadBytes
	if r := reservationOf(ctx); r != nil {
		share := r.budget.connLimit / 8
		batchBytes, keep = int(min(int64(batchBytes), share)), min(keep, share)
	}
	return batchBytes, keep
}

// sendBatch sends one batch, charged to the budget before it is encoded
// (responses.go): its bytes, and keep more while it waits in the
// transport. A refusal (*OverBudgetError) ends the scan, which the client
// resumes from its cursor after the RetryInfo delay.
func sendBatch(ctx context.Context, stream grpc.ServerStreamingServer[rolloutv1.ScanResponse], b shard.Batch, raw bool, keep int64) error {
	var msg any
	var size int
	if raw {
		size = scanFrameSize(b.Raw, b.Cursor)
	} else {
		resp := &rolloutv1.ScanResponse{Records: b.Records, Cursor: b.Cursor}
		msg, size = resp, proto.Size(resp)
	}
	rc, err := reserveSend(ctx, int64(size)+keep)
	if err != nil {
		return err
	}
	if raw {
		msg = newScanFrame(b.Raw, b.Cursor)
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

// scanFilter returns the request's record filter, or nil for none.
func scanFilter(req *rolloutv1.ScanRequest) func(*rolloutv1.Record) bool {
	return recordFilter(req.GetRolloutId(), req.GetRole(), req.IncludeInTraining)
}

// recordFilter keeps the records of rollout, with role, whose
// include_in_training is *training; an empty rollout, ROLE_UNSPECIFIED
// and nil select every record. Nil for no filter at all.
func recordFilter(rollout string, role rolloutv1.Role, training *bool) func(*rolloutv1.Record) bool {
	if rollout == "" && role == rolloutv1.Role_ROLE_UNSPECIFIED && training == nil {
		return nil
	}
	return func(r *rolloutv1.Record) bool {
		return (rollout == "" || r.GetRolloutId() == rollout) &&
			(role == rolloutv1.Role_ROLE_UNSPECIFIED || r.GetRole() == role) &&
			(training == nil || r.GetIncludeInTraining() == *training)
	}
}

// projection returns a function that clears every Record field the mask
// does not name, or nil for an empty mask (whole records). id and seq are
// always kept. Paths are top-level field names, in proto or JSON form.
func projection(mask *fieldmaskpb.FieldMask) (func(*rolloutv1.Record), error) {
	if len(mask.GetPaths()) == 0 {
		return nil, nil
	}
	fields := (&rolloutv1.Record{}).ProtoReflect().Descriptor().Fields()
	keep := map[protoreflect.FieldNumber]bool{
		fields.ByName("id").Number():  true,
		fields.ByName("seq").Number(): true,
	}
	for i, p := range mask.GetPaths() {
		fd := fields.ByName(protoreflect.Name(p))
		if fd == nil {
			fd = fields.ByJSONName(p)
		}
		if fd == nil {
			// The path is the client's: quote no more of it than a log
			// line or a status message should carry.
			return nil, &validate.FieldError{Field: fmt.Sprintf("fields.paths[%d]", i), Rule: "must name a top-level Record field", Detail: fmt.Sprintf("got %q", truncate(p, maxLoggedClientString))}
		}
		keep[fd.Number()] = true
	}
	return func(r *rolloutv1.Record) {
		m := r.ProtoReflect()
		var drop []protoreflect.FieldDescriptor
		m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
			if !keep[fd.Number()] {
				drop = append(drop, fd)
			}
			return true
		})
		for _, fd := range drop {
			m.Clear(fd)
		}
	}, nil
}
