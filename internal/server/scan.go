package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	if err := validate.Shard(req.GetShard()); err != nil {
		return toStatus(err)
	}
	project, err := projection(req.GetFields())
	if err != nil {
		return toStatus(err)
	}
	ctx := stream.Context()
	call := callFrom(ctx)
	cursor := req.GetAfterSeq()
	opts := shard.ScanOptions{
		AfterSeq: req.GetAfterSeq(),
		Limit:    int(req.GetLimit()),
		Filter:   scanFilter(req),
		Follow:   req.GetFollow(),
		Notifier: s.notifier,
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
		var err error
		if opts.Raw {
			err = stream.SendMsg(newScanFrame(b.Raw, b.Cursor))
		} else {
			err = stream.Send(&rolloutv1.ScanResponse{Records: b.Records, Cursor: b.Cursor})
		}
		if err != nil {
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
	f := classify(err, false)
	f.hint += fmt.Sprintf(" (resume with after_seq=%d)", cursor)
	return f.resumeAt(cursor).err()
}

// scanFilter returns the request's record filter, or nil for none.
func scanFilter(req *rolloutv1.ScanRequest) func(*rolloutv1.Record) bool {
	rollout, role := req.GetRolloutId(), req.GetRole()
	training := req.IncludeInTraining
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
