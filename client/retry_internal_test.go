package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// retryable decides from the code and the reason alone.
func TestRetryable(t *testing.T) {
	tests := []struct {
		code         codes.Code
		reason       string
		delay        time.Duration
		append, read bool
		// del: DeleteShard; cdel: with an expected last seq.
		del, cdel bool
	}{
		{codes.Unavailable, ReasonOutcomeUnknown, 0, true, false, false, false},
		// After the server's commit timeout, with its RetryInfo.
		{codes.Unavailable, ReasonOutcomeUnknown, 100 * time.Millisecond, true, false, false, false},
		{codes.DeadlineExceeded, ReasonOutcomeUnknown, 0, true, false, false, false},
		{codes.Unavailable, ReasonNotCommitted, 100 * time.Millisecond, true, false, true, true},
		{codes.DeadlineExceeded, ReasonNotCommitted, 0, true, false, true, true},
		{codes.ResourceExhausted, ReasonBackpressure, 200 * time.Millisecond, true, false, false, false},
		{codes.ResourceExhausted, ReasonRateLimited, time.Second, true, true, true, true},
		{codes.ResourceExhausted, ReasonRateLimited, 0, false, false, false, false},
		{codes.ResourceExhausted, ReasonTooLarge, 0, false, false, false, false},
		{codes.ResourceExhausted, ReasonStoreFull, 0, false, false, false, false},
		{codes.ResourceExhausted, "", 0, false, false, false, false},
		{codes.Unavailable, ReasonScanInterrupted, 0, false, true, false, false},
		{codes.Unavailable, "SOMETHING_NEW", 0, false, false, false, false},
		{codes.Unavailable, "", 0, true, true, false, true},
		{codes.DeadlineExceeded, "", 0, true, true, false, true},
		{codes.Canceled, "", 0, false, false, false, false},
		{codes.InvalidArgument, "", 0, false, false, false, false},
		{codes.AlreadyExists, "", 0, false, false, false, false},
		{codes.NotFound, "", 0, false, false, false, false},
		{codes.Internal, "", 0, false, false, false, false},
		{codes.FailedPrecondition, ReasonSeqMismatch, 0, false, false, false, false},
	}
	for _, tt := range tests {
		e := &Error{Code: tt.code, Reason: tt.reason, RetryDelay: tt.delay}
		if got := retryable(appendCall, e); got != tt.append {
			t.Errorf("Append %v %q %v: retryable %v, want %v", tt.code, tt.reason, tt.delay, got, tt.append)
		}
		if got := retryable(readCall, e); got != tt.read {
			t.Errorf("read %v %q %v: retryable %v, want %v", tt.code, tt.reason, tt.delay, got, tt.read)
		}
		if got := retryable(deleteCall, e); got != tt.del {
			t.Errorf("DeleteShard %v %q %v: retryable %v, want %v", tt.code, tt.reason, tt.delay, got, tt.del)
		}
		if got := retryable(conditionalDeleteCall, e); got != tt.cdel {
			t.Errorf("conditional DeleteShard %v %q %v: retryable %v, want %v", tt.code, tt.reason, tt.delay, got, tt.cdel)
		}
		// CommitConsumer resends as Append does.
		if got := retryable(commitCall, e); got != tt.append {
			t.Errorf("CommitConsumer %v %q %v: retryable %v, want %v", tt.code, tt.reason, tt.delay, got, tt.append)
		}
	}
}

// Waits grow to the cap, are jittered within [b/2, b], and are never
// shorter than the server's RetryInfo.
func TestBackoff(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 10, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	low := func(time.Duration) time.Duration { return 0 }
	high := func(n time.Duration) time.Duration { return n - 1 }
	for n, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		want *= time.Millisecond
		if lo, hi := p.backoff(n+1, 0, low), p.backoff(n+1, 0, high); lo != want/2 || hi != want {
			t.Errorf("attempt %d: waits %v..%v, want %v..%v", n+1, lo, hi, want/2, want)
		}
	}
	if got := p.backoff(1, 2*time.Second, low); got != 2*time.Second {
		t.Errorf("with a RetryInfo of 2s: %v", got)
	}
	if got := p.backoff(1, 2*time.Second, high); got != 2*time.Second+400*time.Millisecond {
		t.Errorf("with a RetryInfo of 2s, jittered: %v", got)
	}
}

// STORE_FULL is its own class: not a batch to split, not backpressure.
func TestStoreFullClass(t *testing.T) {
	e := &Error{Code: codes.ResourceExhausted, Reason: ReasonStoreFull}
	if !errors.Is(e, ErrStoreFull) || errors.Is(e, ErrTooLarge) || errors.Is(e, ErrBackpressure) || errors.Is(e, ErrOutcomeUnknown) {
		t.Errorf("STORE_FULL: ErrStoreFull %v, ErrTooLarge %v, ErrBackpressure %v, ErrOutcomeUnknown %v; want only the first",
			errors.Is(e, ErrStoreFull), errors.Is(e, ErrTooLarge), errors.Is(e, ErrBackpressure), errors.Is(e, ErrOutcomeUnknown))
	}
}

// The defaults are docs/clients.md's table, which the Python client's
// tests check too: the two clients cannot drift apart.
func TestDefaultsMatchTheDoc(t *testing.T) {
	doc := docDefaults(t)
	c := defaultConfig()
	got := map[string]string{
		"call_timeout":    c.callTimeout.String(),
		"max_attempts":    fmt.Sprint(c.retry.MaxAttempts),
		"first_backoff":   c.retry.InitialBackoff.String(),
		"max_backoff":     c.retry.MaxBackoff.String(),
		"attempt_timeout": c.attemptTimeout.String(),
		"reconnect_first": reconnect.Backoff.BaseDelay.String(),
		"reconnect_max":   reconnect.Backoff.MaxDelay.String(),
		"connect_timeout": reconnect.MinConnectTimeout.String(),
	}
	for k, v := range got {
		if doc[k] != v {
			t.Errorf("%s: the Go client has %s, docs/clients.md says %q", k, v, doc[k])
		}
	}
	if len(doc) != len(got) {
		t.Errorf("docs/clients.md lists %v, the test knows %d keys", doc, len(got))
	}
	// gRPC's C core (the Python client) has these built in.
	if reconnect.Backoff.Multiplier != 1.6 || reconnect.Backoff.Jitter != 0.2 {
		t.Errorf("reconnect backoff %+v: want multiplier 1.6, jitter 0.2, as grpc's C core", reconnect.Backoff)
	}
}

// docDefaults reads the defaults table of docs/clients.md: key -> default.
func docDefaults(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../docs/clients.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		out[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.TrimSpace(cells[2])
	}
	return out
}

// With the server down, the waits of the default policy add up to the
// bounds docs/clients.md states: 3.55 s to 7.1 s.
func TestDefaultWaitBounds(t *testing.T) {
	var lo, hi time.Duration
	p := DefaultRetryPolicy
	for n := 1; n < p.MaxAttempts; n++ {
		lo += p.backoff(n, 0, func(time.Duration) time.Duration { return 0 })
		hi += p.backoff(n, 0, func(d time.Duration) time.Duration { return d - 1 })
	}
	if lo != 3550*time.Millisecond || hi != 7100*time.Millisecond {
		t.Errorf("the default waits add up to %v..%v, docs/clients.md says 3.55s..7.1s", lo, hi)
	}
}

// A Scan resumes after exactly the failures the table shared with the
// Python client lists (tests/test_scan_rules.py reads it too).
func TestScanResumeTable(t *testing.T) {
	b, err := os.ReadFile("../clients/scan_resume.json")
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Cases []struct {
			Code       codes.Code `json:"code"`
			Reason     string     `json:"reason"`
			RetryDelay float64    `json:"retry_delay"`
			Resume     bool       `json:"resume"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Cases) == 0 {
		t.Fatal("clients/scan_resume.json: no cases")
	}
	for _, c := range table.Cases {
		e := &Error{Code: c.Code, Reason: c.Reason, RetryDelay: time.Duration(c.RetryDelay * float64(time.Second))}
		if got := retryable(readCall, e); got != c.Resume {
			t.Errorf("Scan broken with %v %q (RetryInfo %vs): resumes %v, the table says %v", c.Code, c.Reason, c.RetryDelay, got, c.Resume)
		}
	}
}
