package main

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func shardList(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("exp-%d/actor-%d", i%13, i)
	}
	return out
}

// ringPick is gRFC A42's ring, written out as a client in another language
// builds it (equal weights): each address sorted, hashed with XXH64 as
// "ADDR_0", "ADDR_1", … up to its share of the ring size; a shard's hash
// (XXH64 of the header's value) picks the first entry at or above it,
// wrapping around.
func ringPick(addrs []string, minRing, maxRing float64) func(shard string) string {
	keys := append([]string(nil), addrs...)
	sort.Strings(keys)
	w := 1 / float64(len(keys))
	scale := math.Min(math.Ceil(w*minRing)/w, maxRing)
	type entry struct {
		hash uint64
		addr string
	}
	var ring []entry
	var current, target float64
	for _, k := range keys {
		target += scale * w
		for i := 0; current < target; i++ {
			ring = append(ring, entry{xxhash.Sum64String(k + "_" + strconv.Itoa(i)), k})
			current++
		}
	}
	sort.Slice(ring, func(i, j int) bool { return ring[i].hash < ring[j].hash })
	return func(shard string) string {
		h := xxhash.Sum64String(shard)
		i := sort.Search(len(ring), func(i int) bool { return ring[i].hash >= h })
		if i == len(ring) {
			i = 0
		}
		return ring[i].addr
	}
}

// The program's picks, made by grpc-go's own picker through the client,
// are gRFC A42's ring as written above, for the client's ring sizes (1024
// to 4096): 1,000 shards over three and over five addresses, none of them
// reachable.
func TestPicksAreTheRing(t *testing.T) {
	shards := shardList(1000)
	for _, addrs := range [][]string{
		{"10.0.0.7:50051", "10.0.0.3:50051", "10.0.0.12:50051"},
		{"10.244.1.5:50051", "10.244.2.9:50051", "10.244.3.4:50051", "10.244.4.17:50051", "10.244.5.2:50051"},
	} {
		var out, stderr bytes.Buffer
		if err := run([]string{"-addrs", strings.Join(addrs, ",")}, strings.NewReader(strings.Join(shards, "\n")+"\n\n"), &out, &stderr); err != nil {
			t.Fatalf("run: %v\n%s", err, stderr.String())
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != len(shards) {
			t.Fatalf("%d lines for %d shards", len(lines), len(shards))
		}
		ref := ringPick(addrs, 1024, 4096)
		per := map[string]int{}
		for i, line := range lines {
			shard, addr, ok := strings.Cut(line, "\t")
			if !ok || shard != shards[i] {
				t.Fatalf("line %d is %q, want %q then a tab", i, line, shards[i])
			}
			if want := ref(shard); addr != want {
				t.Errorf("shard %s: picked %s, the ring says %s", shard, addr, want)
			}
			per[addr]++
		}
		for _, a := range addrs {
			if per[a] < len(shards)/(2*len(addrs)) {
				t.Errorf("%s got %d of %d shards", a, per[a], len(shards))
			}
		}
		t.Logf("%d addresses: %v", len(addrs), per)
	}
}

func TestBadAddrs(t *testing.T) {
	for _, addrs := range []string{"", "10.0.0.1", "10.0.0.1:1,10.0.0.1:1"} {
		var out, stderr bytes.Buffer
		if err := run([]string{"-addrs", addrs}, strings.NewReader("a/b\n"), &out, &stderr); err != errUsage {
			t.Errorf("-addrs %q: %v", addrs, err)
		}
	}
}
