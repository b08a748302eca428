package server

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/faultstore"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
	"github.com/rolloutd/rolloutd/internal/shard"
	"github.com/rolloutd/rolloutd/internal/shard/format"
)

// Internals that storage errors carry: a local store's absolute path, and
// an Azure endpoint with its account, container and prefix.
const (
	secretPath = "/var/lib/rolloutd/data/shards/s/_manifest"
	secretURL  = "https://rolloutdprod.blob.core.windows.net/rollouts/team-prefix/shards/s/_manifest"
)

// leak fails (or panics) every read and write of shard "s", or only the
// writes of its generations, with an error whose text carries secretPath
// and secretURL.
type leak struct {
	class       error
	panics      bool
	generations bool // fail only the generation puts
}

func (l leak) store() *faultstore.Store {
	s := faultstore.New(memstore.New(), 1)
	m := faultstore.Match{Ops: []faultstore.Op{faultstore.OpGet, faultstore.OpPut}, Prefix: format.ShardPrefix("s")}
	if l.generations {
		m.Ops = []faultstore.Op{faultstore.OpPut}
		m.If = func(c faultstore.Call) bool { return format.IsDataBlob("s", c.Name) }
	}
	s.Intercept(m, func(context.Context, faultstore.Call) error {
		if l.panics {
			panic(fmt.Sprintf("injected panic reading %s from %s", secretPath, secretURL))
		}
		return fmt.Errorf("open %s: GET %s: %w", secretPath, secretURL, l.class)
	})
	return s
}

// observedLogger logs to the test and to the returned observer.
func observedLogger(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core)), logs
}

var requestIDInMessage = regexp.MustCompile(`request id ([0-9a-f-]{36})$`)

// Internal, DataLoss and storage-caused Unavailable reach the client as a
// generic text with a request id, keeping the ErrorInfo reason, its
// metadata (Scan's resume cursor) and the RetryInfo a client acts on; the
// log line under that request id holds the text the client did not get.
// This holds on every path: unary handlers, Scan, and panics in either.
func TestErrorTextsWithholdInternals(t *testing.T) {
	tests := []struct {
		name   string
		leak   leak
		call   func(context.Context, rolloutv1.RolloutServiceClient) error
		code   codes.Code
		reason string
		retry  bool
		logged string // the log message holding the details
	}{
		{"Get, storage unavailable", leak{class: blob.ErrUnavailable}, get, codes.Unavailable, "", false, "rpc error withheld from the client"},
		{"Get, unclassified", leak{class: io.ErrClosedPipe}, get, codes.Internal, "", false, "rpc error withheld from the client"},
		{"Get, corrupt", leak{class: shard.ErrCorrupt}, get, codes.DataLoss, "", false, "rpc error withheld from the client"},
		// (Storage that is unavailable, or whose outcome is unknown, gets
		// retried by the writer until the deadline.)
		{"Append, store failed", leak{class: blob.ErrStoreFailed, generations: true}, appendS, codes.Unavailable, rolloutv1.ErrorReason_NOT_COMMITTED.String(), true, "rpc error withheld from the client"},
		{"Scan, storage unavailable", leak{class: blob.ErrUnavailable}, scan, codes.Unavailable, rolloutv1.ErrorReason_SCAN_INTERRUPTED.String(), false, "rpc error withheld from the client"},
		{"Scan, store failed", leak{class: blob.ErrStoreFailed}, scan, codes.Unavailable, rolloutv1.ErrorReason_SCAN_INTERRUPTED.String(), false, "rpc error withheld from the client"},
		{"Get, panic", leak{panics: true}, get, codes.Internal, "", false, "rpc handler panicked"},
		{"Scan, panic", leak{panics: true}, scan, codes.Internal, "", false, "rpc handler panicked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log, logs := observedLogger(t)
			ts := startServer(t, Config{Store: tt.leak.store(), Logger: log})
			err := tt.call(rpcCtx(t), ts.client)
			st := status.Convert(err)
			if st.Code() != tt.code {
				t.Fatalf("got %v, want %v", st, tt.code)
			}
			for _, secret := range []string{"/var/lib", "rolloutdprod", "blob.core.windows.net", "team-prefix"} {
				if strings.Contains(st.Message(), secret) || strings.Contains(fmt.Sprint(st.Details()), secret) {
					t.Errorf("the client sees %q: %q %v", secret, st.Message(), st.Details())
				}
			}
			d := detailsOf(t, st)
			if d.reason(t) != tt.reason || (d.retry != nil) != tt.retry || d.bad != nil {
				t.Errorf("details %v, want reason %q, RetryInfo %v", st.Details(), tt.reason, tt.retry)
			}
			if tt.reason == rolloutv1.ErrorReason_SCAN_INTERRUPTED.String() && d.info.GetMetadata()[MetadataResumeAfterSeq] != "7" {
				t.Errorf("metadata %v, want %s=7", d.info.GetMetadata(), MetadataResumeAfterSeq)
			}
			m := requestIDInMessage.FindStringSubmatch(st.Message())
			if m == nil {
				t.Fatalf("message %q names no request id", st.Message())
			}
			id := m[1]
			var details, access int
			for _, e := range logs.FilterField(zap.String("request_id", id)).All() {
				text := fmt.Sprint(e.ContextMap())
				switch e.Message {
				case tt.logged:
					details++
					if !strings.Contains(text, secretPath) || !strings.Contains(text, secretURL) {
						t.Errorf("%q under request id %s lacks the details: %v", e.Message, id, e.ContextMap())
					}
				case "rpc failed":
					access++
				}
			}
			if details != 1 || access != 1 {
				t.Errorf("request id %s: %d %q lines and %d access lines, want one each; the log:\n%v", id, details, tt.logged, access, logs.All())
			}
		})
	}
}

func get(ctx context.Context, c rolloutv1.RolloutServiceClient) error {
	_, err := c.Get(ctx, &rolloutv1.GetRequest{Shard: "s", Id: "a"})
	return err
}

func appendS(ctx context.Context, c rolloutv1.RolloutServiceClient) error {
	_, err := c.Append(ctx, appendReq("s", "a"))
	return err
}

func scan(ctx context.Context, c rolloutv1.RolloutServiceClient) error {
	stream, err := c.Scan(ctx, &rolloutv1.ScanRequest{Shard: "s", AfterSeq: 7})
	if err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
}
