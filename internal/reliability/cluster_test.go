package reliability

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/server"
)

// instance is one in-process rolloutd: a server.Server on a bufconn
// listener, with a client connected to it.
type instance struct {
	name   string
	srv    *server.Server
	reg    *prometheus.Registry
	conn   *grpc.ClientConn
	client rolloutv1.RolloutServiceClient
	served chan error
}

// startInstance builds a server from cfg and serves it. cfg.Registerer is
// replaced by a registry of the instance's own.
func startInstance(t testing.TB, name string, cfg server.Config) *instance {
	t.Helper()
	in := &instance{name: name, reg: prometheus.NewRegistry(), served: make(chan error, 1)}
	cfg.Registerer = in.reg
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	in.srv = srv
	lis := bufconn.Listen(1 << 20)
	go func() { in.served <- srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///"+name,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	in.conn = conn
	in.client = rolloutv1.NewRolloutServiceClient(conn)
	return in
}

// stop shuts the instance down within budget (0: at once, as a crash
// would: in-flight RPCs are cut off and every writer is aborted) and waits
// for Serve to return.
func (in *instance) stop(t testing.TB, budget time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	in.srv.Shutdown(ctx)
	if err := <-in.served; err != nil {
		t.Errorf("%s: Serve: %v", in.name, err)
	}
	in.conn.Close()
}

// metric sums the samples of a counter or gauge of the instance.
func (in *instance) metric(name string) float64 {
	return gatherSum(in.reg, name)
}

func gatherSum(g prometheus.Gatherer, name string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return -1
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// retryable says whether a client should retry an Append that failed with
// err, with the same ids. Everything else is a violation for the valid
// requests these tests send.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted, codes.ResourceExhausted:
		return true
	}
	return false
}

// codeCounts counts the failures clients saw, by code.
type codeCounts struct {
	mu sync.Mutex
	m  map[codes.Code]int
}

func (c *codeCounts) add(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[codes.Code]int{}
	}
	c.m[status.Code(err)]++
}

func (c *codeCounts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := ""
	for code := range codes.Code(17) {
		if n := c.m[code]; n > 0 {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%v %d", code, n)
		}
	}
	if s == "" {
		return "none"
	}
	return s
}

// violations collects invariant violations from many goroutines, and
// reports them with the run's reproduction hint.
type violations struct {
	mu     sync.Mutex
	errs   []string
	byKind map[string]int
}

func (v *violations) add(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs = append(v.errs, msg)
	if v.byKind == nil {
		v.byKind = map[string]int{}
	}
	v.byKind[kindOf(msg)]++
}

var (
	quotedRE = regexp.MustCompile(`"[^"]*"`)
	numberRE = regexp.MustCompile(`[0-9]+`)
)

// kindOf reduces a violation to its kind, for the summary: quoted text and
// numbers blanked, first line only, cut short.
func kindOf(msg string) string {
	msg, _, _ = strings.Cut(msg, "\n")
	msg = numberRE.ReplaceAllString(quotedRE.ReplaceAllString(msg, `"…"`), "N")
	if len(msg) > 90 {
		msg = msg[:90] + "…"
	}
	return msg
}

func (v *violations) addErr(err error) {
	if err != nil {
		v.add("%v", err)
	}
}

// report fails t with every violation (at most 50 printed) and the hint.
func (v *violations) report(t testing.TB, hint string) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, e := range v.errs {
		if i == 50 {
			t.Errorf("… and %d more", len(v.errs)-50)
			break
		}
		t.Error(e)
	}
	if len(v.errs) > 0 {
		kinds := make([]string, 0, len(v.byKind))
		for k, n := range v.byKind {
			kinds = append(kinds, fmt.Sprintf("%d× [%s]", n, k))
		}
		sort.Strings(kinds)
		t.Errorf("%d invariant violations (%s); %s", len(v.errs), strings.Join(kinds, ", "), hint)
	}
}
