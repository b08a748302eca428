package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// A commit the server gives up on after its CommitTimeout, far inside the
// call's deadline, is OUTCOME_UNKNOWN on UNAVAILABLE with a RetryInfo: the
// call's deadline did not pass, so it is never DEADLINE_EXCEEDED. (The log
// is cut: the create's answer is lost and reading the position back fails
// until CommitTimeout; the retry on a replacement fails to open.) An
// append whose own deadline ends first is DEADLINE_EXCEEDED.
func TestCommitTimeoutIsNotDeadlineExceeded(t *testing.T) {
	fs := faultstore.New(memstore.New(), 1)
	cfg := Config{Store: fs, Writer: testWriterOptions(t)}
	cfg.Writer.CommitTimeout = 200 * time.Millisecond
	ts := startServer(t, cfg)
	if _, err := ts.client.Append(rpcCtx(t), appendReq("s", "a")); err != nil {
		t.Fatal(err)
	}
	heal := fs.Partition(format.LogPrefix("s"), false)
	defer heal()

	_, err := ts.client.Append(rpcCtx(t), appendReq("s", "b")) // a 10 s deadline
	st := status.Convert(err)
	d := detailsOf(t, st)
	if st.Code() != codes.Unavailable || d.reason(t) != rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String() || d.retry == nil {
		t.Errorf("commit timeout inside the call's deadline: %v %v, want Unavailable OUTCOME_UNKNOWN with a RetryInfo", st, st.Details())
	}

	if _, err := ts.client.Append(rpcCtx(t), appendReq("t", "a")); err != nil {
		t.Fatal(err)
	}
	healT := fs.Partition(format.LogPrefix("t"), true)
	defer healT()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = ts.client.Append(ctx, appendReq("t", "b"))
	// The client's own deadline may end the call before the answer comes.
	if st := status.Convert(err); st.Code() != codes.DeadlineExceeded {
		t.Errorf("append whose own deadline ended with its commit in flight: %v, want DeadlineExceeded", st)
	}
}
