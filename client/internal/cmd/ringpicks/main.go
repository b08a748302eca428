// Command ringpicks prints the pod that the Go client's shard affinity
// (client.WithAffinity: grpc-go's own ring_hash picker, keyed on the
// rolloutd-shard header) picks for each shard, for a given set of pod
// addresses. Clients in other languages build the same ring themselves;
// a cross-language test compares their picks with these.
//
// It picks for real, not by a second implementation of the ring: it starts
// one fake RolloutService per address on 127.0.0.1, points a manual
// resolver at the given addresses (they are the ring's keys, as a headless
// Service's DNS answer would be), dials each address's fake server in
// their place, sends one Get per shard through client.Client, and prints
// which address's server received it. The addresses need not be
// reachable: nothing connects to them.
//
// Run it from the repository root, with the shards on stdin, one a line:
//
//	printf 'exp-1/actor-1\nexp-1/actor-2\n' |
//	    go run ./client/internal/cmd/ringpicks -addrs 10.0.0.1:50051,10.0.0.2:50051
//
// It prints one line per shard, in input order: the shard, a tab, and the
// picked address exactly as given in -addrs:
//
//	exp-1/actor-1	10.0.0.2:50051
//	exp-1/actor-2	10.0.0.1:50051
//
// Empty lines are skipped. It exits 1 with a message on stderr on any
// failure, and 2 on bad flags.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"github.com/rolloutd/rolloutd/client"
	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

func main() {
	err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "ringpicks:", err)
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// run reads shards from in and prints each one's pick to out.
func run(args []string, in io.Reader, out, stderr io.Writer) error {
	fs := flag.NewFlagSet("ringpicks", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addrList := fs.String("addrs", "", "comma-separated pod addresses (host:port), the ring's keys")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	addrs, err := parseAddrs(*addrList)
	if err != nil {
		fmt.Fprintln(stderr, "ringpicks: -addrs:", err)
		return errUsage
	}
	var shards []string
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			shards = append(shards, s)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	picks, err := pick(addrs, shards)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(out)
	for i, s := range shards {
		fmt.Fprintf(w, "%s\t%s\n", s, picks[i])
	}
	return w.Flush()
}

func parseAddrs(list string) ([]string, error) {
	seen := map[string]bool{}
	var addrs []string
	for a := range strings.SplitSeq(list, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, err
		}
		if seen[a] {
			return nil, fmt.Errorf("%s given twice", a)
		}
		seen[a] = true
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil, errors.New("give at least one address")
	}
	return addrs, nil
}

// pick returns the address the client's affinity routes each shard to.
func pick(addrs, shards []string) ([]string, error) {
	local := map[string]string{} // given address -> its fake server's
	for _, a := range addrs {
		f, err := startFake(a)
		if err != nil {
			return nil, err
		}
		defer f.stop()
		local[a] = f.lis.Addr().String()
	}
	r := manual.NewBuilderWithScheme("ringpicks")
	var st resolver.State
	for _, a := range addrs {
		st.Endpoints = append(st.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
	}
	r.InitialState(st)
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		l, ok := local[addr]
		if !ok {
			return nil, fmt.Errorf("no fake server for %s", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", l)
	}
	c, err := client.New(r.Scheme()+":///rolloutd", client.WithAffinity(true),
		client.WithDialOptions(grpc.WithResolvers(r), grpc.WithContextDialer(dialer)))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	picks := make([]string, len(shards))
	for i, s := range shards {
		rec, err := c.Get(ctx, s, "ringpicks")
		if err != nil {
			return nil, fmt.Errorf("shard %q: %w", s, err)
		}
		picks[i] = rec.GetContent()
	}
	return picks, nil
}

// fake is a RolloutService that answers every Get with a record whose
// content is the address it stands in for.
type fake struct {
	rolloutv1.UnimplementedRolloutServiceServer
	addr string
	lis  net.Listener
	srv  *grpc.Server
	done chan struct{}
}

func startFake(addr string) (*fake, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &fake{addr: addr, lis: lis, srv: grpc.NewServer(), done: make(chan struct{})}
	rolloutv1.RegisterRolloutServiceServer(f.srv, f)
	go func() {
		defer close(f.done)
		_ = f.srv.Serve(lis)
	}()
	return f, nil
}

func (f *fake) stop() {
	f.srv.Stop()
	<-f.done
}

func (f *fake) Get(ctx context.Context, req *rolloutv1.GetRequest) (*rolloutv1.GetResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if h := md.Get(client.ShardHeader); len(h) != 1 || h[0] != req.GetShard() {
		return nil, fmt.Errorf("shard %q arrived with %s %q", req.GetShard(), client.ShardHeader, h)
	}
	return &rolloutv1.GetResponse{Record: &rolloutv1.Record{Id: req.GetId(), Content: f.addr}}, nil
}
