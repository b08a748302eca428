// Command ringpicks prints the pod that grpc-go's real ring_hash balancer
// picks for each shard, for the Python client's cross-language routing test
// (clients/python/tests/test_ring_crosslang.py).
//
// It starts -servers fake rollout.v1 servers on 127.0.0.1, dials them
// through a manual resolver with the load-balancing config of
// deploy/client/service-config.json (ring_hash on the rolloutd-shard
// header), and sends one Get per shard read from stdin with that header.
// Each fake server answers with its own address, so the pick printed is the
// server that received the call. Output: a line "#addresses<TAB>a,b,c", then
// one "shard<TAB>address" line per shard.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/ringhash" // registers ring_hash_experimental
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

type fake struct {
	rolloutv1.UnimplementedRolloutServiceServer
	addr string
}

func (f *fake) Get(ctx context.Context, _ *rolloutv1.GetRequest) (*rolloutv1.GetResponse, error) {
	return &rolloutv1.GetResponse{Record: &rolloutv1.Record{Id: f.addr}}, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ringpicks:", err)
		os.Exit(1)
	}
}

func run() error {
	servers := flag.Int("servers", 3, "fake servers to start")
	configPath := flag.String("service-config", "deploy/client/service-config.json", "the client service config whose loadBalancingConfig to use")
	flag.Parse()

	raw, err := os.ReadFile(*configPath)
	if err != nil {
		return err
	}
	var full map[string]json.RawMessage
	if err := json.Unmarshal(raw, &full); err != nil {
		return fmt.Errorf("%s: %w", *configPath, err)
	}
	lb, ok := full["loadBalancingConfig"]
	if !ok {
		return fmt.Errorf("%s has no loadBalancingConfig", *configPath)
	}
	serviceConfig := `{"loadBalancingConfig":` + string(lb) + `}`

	var addrs []resolver.Address
	var names []string
	for range *servers {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		s := grpc.NewServer()
		rolloutv1.RegisterRolloutServiceServer(s, &fake{addr: lis.Addr().String()})
		go s.Serve(lis)
		defer s.Stop()
		addrs = append(addrs, resolver.Address{Addr: lis.Addr().String()})
		names = append(names, lis.Addr().String())
	}

	r := manual.NewBuilderWithScheme("ringpicks")
	r.InitialState(resolver.State{Addresses: addrs})
	conn, err := grpc.NewClient(r.Scheme()+":///fakes",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := rolloutv1.NewRolloutServiceClient(conn)

	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	fmt.Fprintf(out, "#addresses\t%s\n", strings.Join(names, ","))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		shard := strings.TrimSpace(in.Text())
		if shard == "" {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ctx = metadata.AppendToOutgoingContext(ctx, "rolloutd-shard", shard)
		resp, err := client.Get(ctx, &rolloutv1.GetRequest{Shard: shard, Id: "x"}, grpc.WaitForReady(true))
		cancel()
		if err != nil {
			return fmt.Errorf("shard %q: %w", shard, err)
		}
		fmt.Fprintf(out, "%s\t%s\n", shard, resp.GetRecord().GetId())
	}
	return in.Err()
}
