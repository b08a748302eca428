package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/blob/memstore"
)

// failingLists fails every listing with an error no class covers:
// INTERNAL, whose text is withheld from the client and logged.
type failingLists struct{ blob.Store }

func (failingLists) List(context.Context, blob.ListOptions) (blob.ListPage, error) {
	return blob.ListPage{}, errors.New("listing broke at /var/lib/rolloutd/secret")
}

// Attack 6 of docs/security.md, at a smaller scale with the same ratio:
// 70,000 failing calls in 10 s may grow the log by at most 1 MiB, about
// 15 bytes a call, whether they are forged page tokens (an unknown kind
// byte; INVALID_ARGUMENT) or calls that fail INTERNAL every time. The
// client's lines beyond its rate are dropped, and its next line says how
// many. Before, each forged token was INTERNAL with an unsampled error
// line and a stack trace (about 1.5 KB), and so was each storage failure.
func TestFailingCallsLogBounded(t *testing.T) {
	forged := base64.RawURLEncoding.EncodeToString([]byte("1\x00\x00zshards/team-b/"))
	for _, c := range []struct {
		name  string
		store blob.Store
		token string
		code  codes.Code
	}{
		{"forged tokens", memstore.New(), forged, codes.InvalidArgument},
		{"internal errors", failingLists{memstore.New()}, "", codes.Internal},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := &logBytes{}
			// As in production (serve.go's newLogger): stacks on Error lines.
			log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), out, zapcore.InfoLevel), zap.AddStacktrace(zapcore.ErrorLevel))
			ts := startTCP(t, Config{Logger: log, Store: c.store})
			client := dial(t, ts.addr, insecure.NewCredentials())
			call := func() error {
				_, err := client.ListShards(context.Background(), &rolloutv1.ListShardsRequest{PageToken: c.token})
				if code := status.Code(err); code != c.code {
					return fmt.Errorf("got %v, want %v", err, c.code)
				}
				return nil
			}
			const calls, workers = 3000, 16
			before := len(out.String())
			start := time.Now()
			var g errgroup.Group
			for w := range workers {
				g.Go(func() error {
					for i := w; i < calls; i += workers {
						if err := call(); err != nil {
							return err
						}
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				t.Fatal(err)
			}
			grown := len(out.String()) - before
			bound := calls * (1 << 20) / 70000
			t.Logf("%d failing calls in %v grew the log by %d bytes (bound %d)", calls, time.Since(start).Round(time.Millisecond), grown, bound)
			if grown > bound {
				t.Fatalf("%d failing calls grew the log by %d bytes, more than %d", calls, grown, bound)
			}
			if dropped := testutil.ToFloat64(ts.Server.errLog.dropped); dropped < calls/2 {
				t.Fatalf("rolloutd_log_lines_dropped_total = %v after %d failures from one client", dropped, calls)
			}
			time.Sleep(time.Second / errorLogRate)
			if err := call(); err != nil {
				t.Fatal(err)
			}
			if tail := out.String()[before+grown:]; !strings.Contains(tail, `"dropped_lines":`) {
				t.Fatalf("the client's next line does not say how many were dropped:\n%s", tail)
			}
		})
	}
}
