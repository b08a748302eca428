package server

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"google.golang.org/protobuf/proto"

	rolloutv1 "github.com/rolloutd/rolloutd/gen/rollout/v1"
)

const (
	getMethod  = "/rollout.v1.RolloutService/Get"
	scanMethod = "/rollout.v1.RolloutService/Scan"
)

// zeroWindow makes the raw client's receive window zero on every stream:
// the server can build and queue responses, but send none of their bytes.
func (c *rawH2) zeroWindow() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		c.t.Fatal(err)
	}
}

// call sends msg as the whole request of stream id.
func (c *rawH2) call(id uint32, msg proto.Message) {
	b, err := proto.Marshal(msg)
	if err != nil {
		c.t.Fatal(err)
	}
	data := make([]byte, 5, 5+len(b))
	binary.BigEndian.PutUint32(data[1:], uint32(len(b)))
	data = append(data, b...)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.fr.WriteData(id, true, data); err != nil {
		c.t.Fatal(err)
	}
}

// closed reports whether the server closed the connection within timeout.
func (c *rawH2) closed(timeout time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Attack 2 at a small scale: a client that never reads (a zero receive
// window) asks for the same large record on many streams. The responses it
// holds are charged to the budget, within its connection's share; the Gets
// past that share are refused (BACKPRESSURE, RetryInfo) before they are
// built; another client reads meanwhile; and the send timeout closes the
// connection and releases every byte.
func TestUnreadResponsesAreBudgetedAndReset(t *testing.T) {
	const (
		maxMsg      = 512 << 10
		recordBytes = 200 << 10
		sendTimeout = admissionWait + 2*time.Second
		streams     = 40
	)
	ts := startTCP(t, Config{MaxMessageBytes: maxMsg, MaxRecordBytes: maxMsg / 2, RequestBudgetBytes: 16 << 20, SendTimeout: sendTimeout})
	b := ts.admission.budget
	c := dial(t, ts.addr, nil)
	rec := &rolloutv1.Record{Id: "big", Content: strings.Repeat("x", recordBytes)}
	if _, err := c.Append(rpcCtx(t), &rolloutv1.AppendRequest{Shard: "s", Records: []*rolloutv1.Record{rec}}); err != nil {
		t.Fatal(err)
	}

	attacker := dialRawH2(t, ts.addr, nil)
	attacker.zeroWindow()
	start := time.Now()
	ids := make([]uint32, streams)
	for i := range ids {
		ids[i] = attacker.open(getMethod)
		attacker.call(ids[i], &rolloutv1.GetRequest{Shard: "s", Id: "big"})
	}
	// The Gets past the share wait admissionWait, then are refused. Under
	// load a Get may not be built yet when the wait ends: read again until
	// every Get still open is charged, for at most the send timeout.
	time.Sleep(admissionWait + 500*time.Millisecond)
	var held, refused int
	var used int64
	for deadline := time.Now().Add(sendTimeout - admissionWait - time.Second); ; time.Sleep(50 * time.Millisecond) {
		held, refused = 0, 0
		for _, id := range ids {
			e, ended := attacker.end(id, 0)
			if !ended {
				held++
				continue
			}
			refused++
			checkBackpressure(t, e.status)
		}
		used = b.inUse()
		if used >= int64(held)*recordBytes || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("%d responses held, %d refused; budget in use %d of %d (connection share %d)", held, refused, used, b.limit, b.connLimit)
	if held == 0 || refused == 0 {
		t.Fatalf("%d held, %d refused: want the connection's share to hold some and refuse the rest", held, refused)
	}
	if used < int64(held)*recordBytes || used > b.connLimit {
		t.Fatalf("budget in use %d with %d responses of %d bytes held: want at least %d and at most the connection's share %d",
			used, held, recordBytes, int64(held)*recordBytes, b.connLimit)
	}

	// Meanwhile, another connection reads.
	got, err := c.Get(rpcCtx(t), &rolloutv1.GetRequest{Shard: "s", Id: "big"})
	if err != nil || len(got.GetRecord().GetContent()) != recordBytes {
		t.Fatalf("another client's Get while the attacker holds its share: %v", err)
	}

	// The send timeout closes the attacker's connection and frees it all.
	if !attacker.closed(sendTimeout + 3*time.Second) {
		t.Fatalf("the connection is open %s after its responses were built, past the send timeout %s", time.Since(start), sendTimeout)
	}
	for deadline := time.Now().Add(2 * time.Second); b.inUse() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("budget in use %d bytes, 2s after the connection closed", b.inUse())
		}
	}
	if n := testutil.ToFloat64(ts.admission.sendTimeouts); n < 1 {
		t.Errorf("rolloutd_send_timeouts_total = %v, want at least 1", n)
	}
	t.Logf("connection closed %s after the first Get (send timeout %s)", time.Since(start).Round(time.Millisecond), sendTimeout)
}

// Attack 2's Scan at a small scale: a Scan whose client never reads holds
// the batches it has built, charged with the read ahead beside them, until
// the send timeout closes the connection and frees them.
func TestUnreadScanIsBudgetedAndReset(t *testing.T) {
	const (
		maxMsg = 512 << 10
		// Long enough for the Scan to build its second batch before the
		// look below gives up, on a loaded 2-core machine under -race:
		// at 2 s (a 1 s look) it once saw only the first batch's unsent
		// part.
		sendTimeout = 3 * time.Second
	)
	ts := startTCP(t, Config{MaxMessageBytes: maxMsg, MaxRecordBytes: maxMsg / 2, RequestBudgetBytes: 16 << 20, SendTimeout: sendTimeout})
	b := ts.admission.budget
	c := dial(t, ts.addr, nil)
	req := &rolloutv1.AppendRequest{Shard: "s"}
	for i := range 4 {
		req.Records = append(req.Records, &rolloutv1.Record{Id: "r" + strconv.Itoa(i), Content: strings.Repeat("x", 100<<10)})
	}
	for range 5 {
		if _, err := c.Append(rpcCtx(t), req); err != nil {
			t.Fatal(err)
		}
		for _, r := range req.Records {
			r.Id += "-x"
		}
	}
	idle := b.inUse()

	attacker := dialRawH2(t, ts.addr, nil)
	attacker.zeroWindow()
	id := attacker.open(scanMethod)
	attacker.call(id, &rolloutv1.ScanRequest{Shard: "s"})
	batch, keep := int64(maxMsg), int64(maxMsg) // a connection share of 4 MiB, an eighth each
	// Two batches are built: one queued in the transport, one waiting for
	// its turn.
	deadline := time.Now().Add(sendTimeout * 2 / 3)
	for b.inUse()-idle < batch && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	used := b.inUse() - idle
	t.Logf("budget in use %d bytes by one unread Scan (batches of up to %d, %d kept beside each)", used, batch, keep)
	if used < batch {
		t.Fatalf("budget in use %d bytes by an unread Scan that built its batches: want at least one batch, %d", used, batch)
	}
	if !attacker.closed(sendTimeout + 3*time.Second) {
		t.Fatalf("the Scan's connection is open past the send timeout %s", sendTimeout)
	}
	for deadline := time.Now().Add(2 * time.Second); b.inUse() != idle; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("budget in use %d bytes, 2s after the connection closed (%d before the Scan)", b.inUse(), idle)
		}
	}
}
