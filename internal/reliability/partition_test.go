package reliability

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
	"github.com/rolloutd/rolloutd/internal/server"
	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
	"github.com/rolloutd/rolloutd/internal/testutil/rolloutdproc"
)

// TestStorePartitionHeals: two rolloutd processes on one Azurite container;
// every store request of process A goes through toxiproxy, which cuts it
// off (open connections reset, new ones refused) for 2 x --commit-timeout,
// then lets it through again. Clients append to one shard through both
// processes all along. Within 5 s of the heal A acknowledges appends again,
// with no restart; every acknowledged record is stored exactly once;
// nothing answered NOT_COMMITTED is stored; and no answer is
// DEADLINE_EXCEEDED before its call's deadline.
func TestStorePartitionHeals(t *testing.T) {
	az := sharedAzurite(t)
	np := startProxy(t, az.Addr)
	defer np.stop()
	const commitTimeout = 500 * time.Millisecond
	container := containerName("partition", 1)
	viaProxy := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=http://%s/%s;",
		azurite.AccountName, azurite.AccountKey, np.listen, azurite.AccountName)
	a := rolloutdproc.Start(t, rolloutdBinary(t), rolloutdproc.Options{
		Name:    "rolloutd-a",
		Args:    []string{"--store", "azblob://" + container, "--commit-timeout", commitTimeout.String()},
		Env:     []string{"AZURE_STORAGE_CONNECTION_STRING=" + viaProxy},
		DropEnv: []string{"AZURE_STORAGE_"},
	})
	b := startProc(t, "rolloutd-b", container, "--commit-timeout", commitTimeout.String())

	const sh = "part/s"
	l := newLedger()
	var mu sync.Mutex
	var notCommitted, doubtful []*rolloutv1.Record
	var v violations
	send := func(c rolloutv1.RolloutServiceClient, rec *rolloutv1.Record) error {
		l.sent(sh, []*rolloutv1.Record{rec})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		deadline, _ := ctx.Deadline()
		resp, err := c.Append(ctx, &rolloutv1.AppendRequest{Shard: sh, Records: []*rolloutv1.Record{rec}})
		if err == nil {
			if aerr := l.acked(sh, resp.GetResults()); aerr != nil {
				v.addErr(aerr)
			}
			return nil
		}
		st := status.Convert(err)
		if st.Code() == codes.DeadlineExceeded && time.Now().Before(deadline) {
			v.add("append %s: DEADLINE_EXCEEDED %v before its deadline: %v", rec.GetId(), time.Until(deadline), err)
		}
		mu.Lock()
		defer mu.Unlock()
		switch reasonOf(st) {
		case rolloutv1.ErrorReason_NOT_COMMITTED.String():
			notCommitted = append(notCommitted, rec)
		case rolloutv1.ErrorReason_OUTCOME_UNKNOWN.String(), "":
			doubtful = append(doubtful, rec)
		default:
			v.add("append %s: %v", rec.GetId(), err)
		}
		return err
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		c := a.Client
		if g == 3 {
			c = b.Client
		}
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_ = send(c, makeRecord(sh, fmt.Sprintf("g%d-%d", g, i), i%500))
				if g == 3 {
					time.Sleep(100 * time.Millisecond)
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	np.phase(t, netPhase{name: "A's store cut off", down: true})
	time.Sleep(2 * commitTimeout)
	np.phase(t, netPhase{})
	healed := time.Now()
	var first time.Duration
	for i := 0; first == 0; i++ {
		if send(a.Client, makeRecord(sh, fmt.Sprintf("after-%d", i), 10)) == nil {
			first = time.Since(healed)
		} else if time.Since(healed) > 5*time.Second {
			break
		}
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if first == 0 {
		t.Fatalf("A still fails appends %v after its store came back\n%s", time.Since(healed), a.Output())
	}

	// The doubtful appends' resends settle them; nothing NOT_COMMITTED is
	// stored.
	for _, rec := range doubtful {
		if err := send(a.Client, rec); err != nil {
			v.add("resend of doubtful %s after the heal: %v", rec.GetId(), err)
		}
	}
	for _, rec := range notCommitted {
		_, err := b.Client.Get(rpcContext(t), &rolloutv1.GetRequest{Shard: sh, Id: rec.GetId()})
		if status.Code(err) != codes.NotFound {
			v.add("%s was answered NOT_COMMITTED; Get: %v", rec.GetId(), err)
		}
	}
	rep, errs := l.checkStore(rpcContext(t), directStore(t, container))
	for _, err := range errs {
		v.addErr(err)
	}
	_, acked := l.counts()
	// A writer the cut stopped with a create in doubt logs its replacement.
	t.Logf("A acked again %v after the heal; %d acked, %d NOT_COMMITTED, %d doubtful (resent); %d stored in %d generations; A: %d writers replaced after a failure, %v open backoffs",
		first.Round(time.Millisecond), acked, len(notCommitted), len(doubtful), rep.stored, rep.generations,
		strings.Count(a.Output(), "replacing failed writer"), a.Metric("rolloutd_writer_open_backoffs_total", ""))
	v.report(t, "the proxy's timing decides which creates are cut; rerun to vary it")
	if first > 5*time.Second {
		t.Errorf("A acked again %v after the heal, want within 5 s", first)
	}
}

// reasonOf is st's rolloutd ErrorInfo reason, or "".
func reasonOf(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == server.ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}

func rpcContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
