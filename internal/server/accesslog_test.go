package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/authz"
)

// logBytes is a zapcore.WriteSyncer that keeps what is logged, so a test
// can measure it.
type logBytes struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBytes) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBytes) Sync() error { return nil }

func (l *logBytes) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// mtlsServer is a server over mTLS enforcing policy, logging to log, with
// a client per identity.
func mtlsServer(t *testing.T, policy string, log *zap.Logger, reg prometheus.Registerer, ids ...string) map[string]rolloutv1.RolloutServiceClient {
	t.Helper()
	p := newPKI(t, true)
	pol, err := authz.Parse([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	ts := startTCP(t, Config{Logger: log, Registerer: reg, Authorizer: authz.NewStatic(pol), MaxMessageBytes: 32 << 20,
		ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(p.reloader.Config()))}})
	clients := map[string]rolloutv1.RolloutServiceClient{}
	for _, id := range ids {
		clients[id] = dial(t, ts.addr, p.creds(t, p.clientCA.ClientURI(t, id)))
	}
	return clients
}

// Three 16 MiB strings on six requests once grew the log by 100 MB: the
// access log ran before the guard and logged them whole. Every string a
// client chose is now logged cut to a bound, with its length, and no status
// message echoes more than its bound either.
func TestLogIsNotAnAmplifier(t *testing.T) {
	out := &logBytes{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), out, zapcore.DebugLevel))
	clients := mtlsServer(t, testPolicy, log, nil, idTrainer, idOther)
	trainer, other := clients[idTrainer], clients[idOther]

	// As long as fits a request under the default --max-message-bytes
	// (16 MiB): a longer one is refused before it is decoded, or logged.
	big := strings.Repeat("a", 15<<20)
	calls := []struct {
		name string
		call func(context.Context) error
	}{
		{"Append to a 16 MiB shard", func(ctx context.Context) error {
			_, err := trainer.Append(ctx, appendReq(big, "a"))
			return err
		}},
		{"Get of a 16 MiB id", func(ctx context.Context) error {
			_, err := trainer.Get(ctx, &rolloutv1.GetRequest{Shard: "team-a/run1", Id: big})
			return err
		}},
		{"Scan of a 16 MiB shard", func(ctx context.Context) error {
			return scanErr(ctx, trainer, &rolloutv1.ScanRequest{Shard: big})
		}},
		{"Scan with a 16 MiB field path", func(ctx context.Context) error {
			return scanErr(ctx, trainer, &rolloutv1.ScanRequest{Shard: "team-a/run1", Fields: &fieldmaskpb.FieldMask{Paths: []string{big}}})
		}},
		{"Get of a 16 MiB shard, no grant for it", func(ctx context.Context) error {
			_, err := trainer.Get(ctx, &rolloutv1.GetRequest{Shard: big, Id: "a"})
			return err
		}},
		{"Scan of a 16 MiB rollout id, no grant for the shard", func(ctx context.Context) error {
			return scanErr(ctx, trainer, &rolloutv1.ScanRequest{Shard: "team-b/run1", RolloutId: big})
		}},
		{"Get of a 16 MiB shard, no grant at all (refused before its body is read)", func(ctx context.Context) error {
			_, err := other.Get(ctx, &rolloutv1.GetRequest{Shard: big, Id: "a"})
			return err
		}},
	}
	for _, c := range calls {
		err := c.call(rpcCtx(t))
		st := status.Convert(err)
		if st.Code() == codes.OK || st.Code() == codes.Unavailable {
			t.Errorf("%s: %v, want a refusal", c.name, err)
		}
		if n := len(st.Message()); n > maxStatusMessage+len(truncated) {
			t.Errorf("%s: a status message of %d bytes", c.name, n)
		}
	}
	logged := out.String()
	if n := len(logged); n > 64<<10 {
		t.Errorf("seven requests logged %d bytes", n)
	}
	for _, want := range []string{`"shard_len":15728640`, `"id_len":15728640`, `"rollout_id_len":15728640`, truncated} {
		if !strings.Contains(logged, want) {
			t.Errorf("the log lacks %s", want)
		}
	}
	t.Logf("seven requests with 16 MiB strings logged %d bytes", len(logged))
}

func scanErr(ctx context.Context, c rolloutv1.RolloutServiceClient, req *rolloutv1.ScanRequest) error {
	stream, err := c.Scan(ctx, req)
	if err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			return err
		}
	}
}

// Every access-log line names the caller's identity (under mTLS), its peer
// address and the RPC's request id. A Scan is logged when its request
// arrives (shard, cursor, follow) and when it ends (records and bytes
// sent, code, duration), and timed under method="Scan".
func TestAccessLogNamesCallerAndScans(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	clients := mtlsServer(t, testPolicy, zap.New(core), reg, idTrainer, idOther)
	trainer, other := clients[idTrainer], clients[idOther]
	ctx := rpcCtx(t)

	if _, err := trainer.Append(ctx, appendReq("team-a/run1", "a", "b", "c")); err != nil {
		t.Fatal(err)
	}
	if _, err := trainer.Get(ctx, &rolloutv1.GetRequest{Shard: "team-b/run1", Id: "a"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Get without a grant for the shard: %v", err)
	}
	stream, err := trainer.Scan(ctx, &rolloutv1.ScanRequest{Shard: "team-a/run1", AfterSeq: 1})
	if err != nil {
		t.Fatal(err)
	}
	var records int
	for {
		resp, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.OK && err.Error() != "EOF" {
				t.Fatal(err)
			}
			break
		}
		records += len(resp.GetRecords())
	}
	if records != 2 {
		t.Fatalf("Scan after seq 1 returned %d records, want 2", records)
	}
	if err := scanErr(ctx, trainer, &rolloutv1.ScanRequest{Shard: "team-b/run1"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Scan without a grant for the shard: %v", err)
	}
	// An identity with no grant at all is refused before its request is
	// read (admission.go); that refusal is logged with the caller too.
	if _, err := other.Get(ctx, &rolloutv1.GetRequest{Shard: "team-a/run1", Id: "a"}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Get with no grant at all: %v", err)
	}
	early := logs.FilterMessage("rpc denied before its body").All()
	if len(early) != 1 {
		t.Fatalf("%d lines for the refusal before the body, want 1", len(early))
	}
	if m := early[0].ContextMap(); m["identity"] != "uri:"+idOther || !strings.HasPrefix(fmt.Sprint(m["peer"]), "127.0.0.1:") {
		t.Errorf("the refusal before the body names identity %v, peer %v", m["identity"], m["peer"])
	}

	type line struct {
		msg, method, code, identity string
	}
	want := []line{
		{"rpc", "Append", "OK", "uri:" + idTrainer},
		{"rpc failed", "Get", "PermissionDenied", "uri:" + idTrainer},
		{"rpc started", "Scan", "", "uri:" + idTrainer},
		{"rpc", "Scan", "OK", "uri:" + idTrainer},
		{"rpc started", "Scan", "", "uri:" + idTrainer},
		{"rpc failed", "Scan", "PermissionDenied", "uri:" + idTrainer},
	}
	var got []line
	for _, e := range logs.FilterLoggerName("access").All() {
		m := e.ContextMap()
		if m["method"] == "Check" || e.Message == "rpc denied" || e.Message == "rpc denied before its body" {
			continue
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		got = append(got, line{e.Message, str("method"), str("code"), str("identity")})
		if p := str("peer"); !strings.HasPrefix(p, "127.0.0.1:") {
			t.Errorf("%s %s: peer %q", e.Message, str("method"), p)
		}
		if len(str("request_id")) != 36 {
			t.Errorf("%s %s: request_id %q", e.Message, str("method"), str("request_id"))
		}
		if sh := str("shard"); sh != "team-a/run1" && sh != "team-b/run1" {
			t.Errorf("%s %s: shard %q", e.Message, str("method"), str("shard"))
		}
		if str("method") == "Scan" {
			if m["follow"] != false || (m["after_seq"] != uint64(1) && m["after_seq"] != uint64(0)) {
				t.Errorf("%s Scan: follow %v after_seq %v", e.Message, m["follow"], m["after_seq"])
			}
			if e.Message == "rpc" {
				if m["records_sent"] != int64(2) || m["bytes_sent"].(int64) <= 0 || m["duration"] == nil {
					t.Errorf("the end of a Scan: %v", m)
				}
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("access log:\n%v\nwant\n%v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("access log line %d: %v, want %v", i, got[i], want[i])
		}
	}
	if n := testutil.CollectAndCount(reg, "rolloutd_rpc_duration_seconds"); n == 0 {
		t.Fatal("no rolloutd_rpc_duration_seconds")
	}
	for _, code := range []string{"OK", "PermissionDenied"} {
		if n := histogramCount(t, reg, "rolloutd_rpc_duration_seconds", map[string]string{"method": "Scan", "code": code}); n != 1 {
			t.Errorf(`rolloutd_rpc_duration_seconds{method="Scan",code=%q} counted %d, want 1`, code, n)
		}
	}
}

// histogramCount is the sample count of the histogram name with labels in
// reg.
func histogramCount(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// fakeAppend is a request with the client strings an Append can carry.
type fakeAppend struct{ shard, requestID string }

func (f fakeAppend) GetShard() string     { return f.shard }
func (f fakeAppend) GetRequestId() string { return f.requestID }

// requestFields cuts every client string, its length beside it, at a
// character boundary.
func TestRequestFieldsBounded(t *testing.T) {
	out := &logBytes{}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), out, zapcore.DebugLevel))
	long := strings.Repeat("é", 1<<20) // 2 MiB, two bytes a character
	log.Info("rpc", requestFields(fakeAppend{shard: "s", requestID: long})...)
	line := out.String()
	if len(line) > 1024 || !strings.Contains(line, `"shard":"s"`) || !strings.Contains(line, `"append_request_id_len":2097152`) ||
		!strings.Contains(line, strings.Repeat("é", maxLoggedClientString/2)+truncated) {
		t.Errorf("%d bytes: %s", len(line), line)
	}
	if strings.Contains(line, `"shard_len"`) {
		t.Errorf("a short string has a length field: %s", line)
	}
}

func TestTruncate(t *testing.T) {
	for _, tt := range []struct {
		s     string
		limit int
		want  string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc" + truncated},
		{"éé", 3, "é" + truncated}, // never half a character
		{"é", 1, truncated},
	} {
		if got := truncate(tt.s, tt.limit); got != tt.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.s, tt.limit, got, tt.want)
		}
	}
}
