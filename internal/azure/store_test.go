package azure

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/rolloutd/rolloutd/internal/blob"
	"github.com/rolloutd/rolloutd/internal/testutil/azurite"
)

func TestNewCreatesTheContainer(t *testing.T) {
	ctx := t.Context()
	name := uniqueContainer("fresh")
	s := newTestStore(t, testConfig(name))
	if _, err := s.client.GetProperties(ctx, nil); err != nil {
		t.Fatalf("container %s after New: %v", name, err)
	}
	// A second process finds it present.
	s2 := newTestStore(t, testConfig(name))
	if _, err := s2.Put(ctx, "x", []byte("x"), blob.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
}

// MustExist never creates the container: New fails on a missing one and
// leaves it missing, and opens an existing one.
func TestNewMustExistNeverCreates(t *testing.T) {
	ctx := t.Context()
	name := uniqueContainer("mustexist")
	cfg := testConfig(name)
	cfg.MustExist = true
	if s, err := New(ctx, cfg); err == nil || !strings.Contains(err.Error(), "does not exist") {
		if err == nil {
			s.Close()
		}
		t.Fatalf("New(MustExist) of a missing container = %v, want \"does not exist\"", err)
	}
	other, err := container.NewClientFromConnectionString(az.ConnectionString, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.GetProperties(ctx, nil); !bloberror.HasCode(err, bloberror.ContainerNotFound) {
		t.Fatalf("container %s after New(MustExist): %v, want ContainerNotFound", name, err)
	}
	newTestStore(t, testConfig(name)) // creates it
	newTestStore(t, cfg)              // and MustExist opens it
}

// forbidContainer answers container requests with fakes: creating is
// always forbidden, and reading answers readStatus/readCode (0: forward).
func forbidContainer(readStatus int, readCode string) func(http.RoundTripper) http.RoundTripper {
	return faultHook(func(next http.RoundTripper, req *http.Request) (*http.Response, error) {
		if isContainerReq(req) {
			if req.Method == http.MethodPut {
				return fakeResponse(req, 403, string(bloberror.AuthorizationPermissionMismatch)), nil
			}
			if readStatus != 0 {
				return fakeResponse(req, readStatus, readCode), nil
			}
		}
		return next.RoundTrip(req)
	})
}

func TestNewContainerNotPermitted(t *testing.T) {
	for _, c := range []struct {
		name       string
		readStatus int
		readCode   string
		want       []string // in the error; nil: New succeeds
	}{
		{"exists, usable", 0, "", nil},
		{"missing", 404, "ContainerNotFound", []string{`"no-create"`, "does not exist", "Storage Blob Data Contributor"}},
		{"unreadable", 403, "AuthorizationPermissionMismatch", []string{`"no-create"`, "not permitted", "Storage Blob Data Contributor", "AuthorizationPermissionMismatch"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The container exists for "exists, usable".
			newTestStore(t, testConfig("no-create"))
			cfg := testConfig("no-create")
			cfg.WrapTransport = forbidContainer(c.readStatus, c.readCode)
			cfg.ConnectionString = az.ConnectionString
			s, err := New(t.Context(), cfg)
			if c.want == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				_ = s.Close()
				return
			}
			if err == nil {
				_ = s.Close()
				t.Fatal("New succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestNewWrongAccountKey(t *testing.T) {
	cfg := testConfig("wrong-key")
	// A well-formed key that is not the account's.
	cfg.ConnectionString = strings.Replace(az.ConnectionString, azurite.AccountKey,
		"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==", 1)
	s, err := New(t.Context(), cfg)
	if err == nil {
		_ = s.Close()
		t.Fatal("New with a wrong key succeeded")
	}
	if !strings.Contains(err.Error(), `"wrong-key"`) || !strings.Contains(err.Error(), "credentials") {
		t.Fatalf("error %q should name the container and the credentials", err)
	}
	if strings.Contains(err.Error(), "AAAAAAAA") {
		t.Fatalf("error %q leaks the key", err)
	}
}

func TestNewRejectsBadConnectionStrings(t *testing.T) {
	const key = "c2VjcmV0LWtleS1ieXRlcw==" // valid base64
	for _, cs := range []string{
		"garbage",
		"AccountName=devstoreaccount1", // no key
		"AccountName=devstoreaccount1;AccountKey=!!not*base64!!;", // undecodable key
		"DefaultEndpointsProtocol=http;AccountKey=" + key + ";",   // no account or endpoint
		"AccountName=a;AccountKey=" + key + ";BlobEndpoint=not-a-url;",
		"AccountName=a;AccountKey=" + key + ";BlobEndpoint=ftp://127.0.0.1:1/a;",
	} {
		cfg := testConfig("bad-connection-string")
		cfg.ConnectionString = cs
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		s, err := New(ctx, cfg)
		cancel()
		if err == nil {
			_ = s.Close()
			t.Errorf("New accepted connection string %q", cs)
			continue
		}
		if !strings.Contains(err.Error(), "connection string") {
			t.Errorf("New(%q) error %q does not say what is wrong", cs, err)
		}
		if strings.Contains(err.Error(), key) || strings.Contains(err.Error(), "not*base64") {
			t.Errorf("New(%q) error %q leaks the key", cs, err)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	good := testConfig("good")
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no endpoint", func(c *Config) { c.ConnectionString = "" }, "neither"},
		{"two endpoints", func(c *Config) { c.AccountURL = "https://a.blob.core.windows.net/" }, "both"},
		{"bad account URL", func(c *Config) { c.ConnectionString = ""; c.AccountURL = "not a url" }, "account URL"},
		{"prefix absolute", func(c *Config) { c.Prefix = "/abs" }, "prefix"},
		{"prefix dotdot", func(c *Config) { c.Prefix = "a/../b" }, "prefix"},
		{"prefix empty segment", func(c *Config) { c.Prefix = "a//b" }, "prefix"},
		{"prefix too long", func(c *Config) { c.Prefix = strings.Repeat("p", 600) }, "prefix"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := good
			c.edit(&cfg)
			s, err := New(t.Context(), cfg)
			if err == nil {
				_ = s.Close()
				t.Fatal("New accepted it")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q lacks %q", err, c.want)
			}
		})
	}
}

func TestValidateContainerName(t *testing.T) {
	for _, n := range []string{"abc", "a-b-c", "0abc", "rolloutd", strings.Repeat("a", 63)} {
		if err := ValidateContainerName(n); err != nil {
			t.Errorf("ValidateContainerName(%q) = %v", n, err)
		}
	}
	for _, n := range []string{"", "ab", strings.Repeat("a", 64), "Upper", "under_score", "-lead", "trail-",
		"dou--ble", "$root", "sp ace", "dot.ted", "ünï"} {
		err := ValidateContainerName(n)
		if err == nil {
			t.Errorf("ValidateContainerName(%q) accepted it", n)
			continue
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", n)) {
			t.Errorf("error %q does not name the container", err)
		}
		// New rejects it before any request.
		cfg := testConfig(n)
		cfg.WrapTransport = faultHook(func(http.RoundTripper, *http.Request) (*http.Response, error) {
			t.Errorf("New(%q) sent a request", n)
			return nil, dialErr()
		})
		if s, err := New(t.Context(), cfg); err == nil {
			_ = s.Close()
			t.Errorf("New accepted container %q", n)
		}
	}
}

func TestPrefix(t *testing.T) {
	ctx := t.Context()
	container := uniqueContainer("prefix")
	cfg := testConfig(container)
	cfg.Prefix = "tenant-a/env/"
	s := newTestStore(t, cfg)
	raw := newTestStore(t, testConfig(container))

	if _, err := raw.Put(ctx, "outside", []byte("o"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	a, err := s.Put(ctx, "x/y", []byte("inside"), blob.PutOptions{IfNoneMatch: true, PutID: "id"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "x/y" {
		t.Fatalf("Put returned name %q", a.Name)
	}
	h, err := raw.Head(ctx, "tenant-a/env/x/y")
	if err != nil || h.ETag != a.ETag {
		t.Fatalf("the prefixed blob is not stored under the prefix: %+v %v", h, err)
	}
	p, err := s.List(ctx, blob.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 1 || p.Items[0].Name != "x/y" || p.Items[0].ETag != a.ETag || p.Items[0].PutID != "id" {
		t.Fatalf("List through the prefix = %+v", p)
	}
	if _, _, err := s.Get(ctx, "outside", blob.GetOptions{}); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Get outside the prefix: %v", err)
	}
	long := strings.Repeat("n", blob.MaxNameBytes-len("tenant-a/env/")+1)
	_, err = s.Put(ctx, long, []byte("x"), blob.PutOptions{})
	wantClass(t, err, blob.ErrInvalidName, "Put of a name that only the prefix makes too long")
}

func TestClosed(t *testing.T) {
	ctx := t.Context()
	s := newTestStore(t, testConfig("closed"))
	if _, err := s.Put(ctx, "x", []byte("x"), blob.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, _, err := s.Get(ctx, "x", blob.GetOptions{})
	wantClass(t, err, blob.ErrClosed, "Get")
	_, err = s.Head(ctx, "x")
	wantClass(t, err, blob.ErrClosed, "Head")
	_, err = s.Put(ctx, "x", nil, blob.PutOptions{})
	wantClass(t, err, blob.ErrClosed, "Put")
	err = s.Delete(ctx, "x", blob.DeleteOptions{})
	wantClass(t, err, blob.ErrClosed, "Delete")
	_, err = s.List(ctx, blob.ListOptions{})
	wantClass(t, err, blob.ErrClosed, "List")
}

// TestMaxConnsBoundsRequestsInFlight: operations beyond MaxConns wait for a
// slot, and the wait honours their context.
func TestMaxConnsBoundsRequestsInFlight(t *testing.T) {
	ctx := t.Context()
	var inFlight, peak atomic.Int32
	release := make(chan struct{})
	cfg := testConfig("max-conns")
	cfg.MaxConns = 2
	cfg.WrapTransport = faultHook(func(next http.RoundTripper, req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodHead {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			<-release
		}
		return next.RoundTrip(req)
	})
	s := newTestStore(t, cfg)
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = s.Head(ctx, "nothing")
		}()
	}
	// A sixth operation with a short deadline cannot get a slot.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	time.Sleep(100 * time.Millisecond)
	_, err := s.Head(short, "nothing")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Head while the slots are taken: %v, want the context's deadline", err)
	}
	close(release)
	wg.Wait()
	if p := peak.Load(); p != 2 {
		t.Fatalf("peak requests in flight = %d, want MaxConns = 2", p)
	}
}

// TestConnectionReuse: 32 concurrent operations on one Store, round after
// round, reuse their connections. A pool sized like the SDK's default (10
// idle per host) churns: every round dials ~22 new connections and closes
// them again into TIME_WAIT (docs/performance.md, target 2).
func TestConnectionReuse(t *testing.T) {
	const workers, rounds = 32, 15
	run := func(t *testing.T, idlePerHost int) int64 {
		var dials atomic.Int64
		cfg := testConfig("reuse")
		cfg.idlePerHost = idlePerHost
		cfg.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
		s := newTestStore(t, cfg)
		data := make([]byte, 1024)
		prefix := uniqueContainer("reuse")
		dials.Store(0) // count only the operations' connections
		for r := range rounds {
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					name := fmt.Sprintf("%s/%d/%d", prefix, r, w)
					if _, err := s.Put(t.Context(), name, data, blob.PutOptions{IfNoneMatch: true}); err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		}
		return dials.Load()
	}
	sized := run(t, 0)        // MaxConns (64) idle connections kept
	defaultLike := run(t, 10) // the SDK default transport's MaxIdleConnsPerHost
	t.Logf("%d rounds of %d concurrent puts: %d dials with the sized pool, %d with 10 idle per host",
		rounds, workers, sized, defaultLike)
	if sized > workers+workers/4 {
		t.Errorf("sized pool dialed %d connections for %d concurrent requests", sized, workers)
	}
	if defaultLike < 4*sized {
		t.Errorf("a 10-connection idle pool dialed only %d times (sized: %d); the comparison no longer shows churn", defaultLike, sized)
	}
}

func TestHTTPS(t *testing.T) {
	inst := azurite.Start(t, azurite.Options{HTTPS: true})
	cfg := testConfig("tls")
	cfg.ConnectionString = inst.ConnectionString
	cfg.RootCAs = inst.RootCAs
	s := newTestStore(t, cfg)
	a, err := s.Put(t.Context(), "x", []byte("over tls"), blob.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	checkBlob(t, s, "x", []byte("over tls"), a, "")
}

// TestPutIDEncoding: any string is a valid PutID; it survives the trip
// through metadata headers, including Azurite's change of key case.
func TestPutIDEncoding(t *testing.T) {
	ctx := t.Context()
	s := newTestStore(t, testConfig("put-ids"))
	prefix := uniqueContainer("id")
	for i, id := range []string{"plain", "with space", "ünï/cödé:%41?&=", "  padded  ", "a\tb"} {
		n := fmt.Sprintf("%s/%d", prefix, i)
		a, err := s.Put(ctx, n, []byte("x"), blob.PutOptions{IfNoneMatch: true, PutID: id})
		if err != nil {
			t.Fatalf("Put with PutID %q: %v", id, err)
		}
		h, err := s.Head(ctx, n)
		if err != nil || h.PutID != id {
			t.Fatalf("Head PutID = %q (%v), want %q", h.PutID, err, id)
		}
		// The idempotent retry recognizes it.
		r, err := s.Put(ctx, n, []byte("x"), blob.PutOptions{IfNoneMatch: true, PutID: id})
		if err != nil || r.ETag != a.ETag {
			t.Fatalf("retry with PutID %q: %+v, %v", id, r, err)
		}
	}
}

// fakeEntraToken is an azcore.TokenCredential issuing unsigned JWTs that
// Azurite's --oauth basic accepts, standing in for workload identity.
type fakeEntraToken struct{ calls atomic.Int32 }

func (f *fakeEntraToken) GetToken(_ context.Context, o policy.TokenRequestOptions) (azcore.AccessToken, error) {
	f.calls.Add(1)
	now := time.Now()
	enc := base64.RawURLEncoding.EncodeToString
	header := enc([]byte(`{"alg":"none","typ":"JWT"}`))
	claims, _ := json.Marshal(map[string]any{
		"aud": "https://storage.azure.com",
		"iss": "https://sts.windows.net/00000000-0000-0000-0000-000000000000/",
		"iat": now.Add(-time.Minute).Unix(),
		"nbf": now.Add(-time.Minute).Unix(),
		"exp": now.Add(time.Hour).Unix(),
		"oid": "rolloutd-test",
	})
	return azcore.AccessToken{Token: header + "." + enc(claims) + ".", ExpiresOn: now.Add(time.Hour)}, nil
}

// TestAccountURLWithTokenCredential exercises the production auth path
// (account URL plus a token credential, as workload identity gives) against
// an HTTPS Azurite that checks bearer tokens.
func TestAccountURLWithTokenCredential(t *testing.T) {
	inst := azurite.Start(t, azurite.Options{HTTPS: true, OAuth: true})
	cred := &fakeEntraToken{}
	cfg := testConfig(uniqueContainer("entra"))
	cfg.ConnectionString = ""
	cfg.AccountURL = inst.BlobEndpoint
	cfg.Credential = cred
	cfg.RootCAs = inst.RootCAs
	s := newTestStore(t, cfg)
	a, err := s.Put(t.Context(), "x", []byte("with a token"), blob.PutOptions{IfNoneMatch: true, PutID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	checkBlob(t, s, "x", []byte("with a token"), a, "t")
	if cred.calls.Load() == 0 {
		t.Fatal("the credential was never asked for a token")
	}
}

// TestMaxConnsBoundsConnections: MaxConns bounds the connections open at
// once, not only the requests in flight. When a slot is released, its
// connection goes back to the idle pool a moment later; a request taking the
// slot in between finds no idle connection and, with no per-host limit,
// dials a new one, which outlives the request that no longer waits for it.
// With slow handshakes (TLS to a loaded Azurite) such dials pile up: the
// bench saw hundreds of connections with MaxConns 64.
func TestMaxConnsBoundsConnections(t *testing.T) {
	const maxConns, workers = 4, 32
	var open, peak, dials atomic.Int32
	cfg := testConfig("max-conns-dial")
	cfg.MaxConns = maxConns
	cfg.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		n := open.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond) // a slow handshake
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			open.Add(-1)
			return nil, err
		}
		return &countedConn{Conn: c, open: &open}, nil
	}
	s := newTestStore(t, cfg)
	peak.Store(open.Load())
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, _ = s.Head(ctx, "nothing")
			}
		})
	}
	wg.Wait()
	t.Logf("%d workers, MaxConns %d: %d dials, peak %d connections open", workers, maxConns, dials.Load(), peak.Load())
	if p := peak.Load(); p > maxConns {
		t.Fatalf("peak connections open = %d, want at most MaxConns = %d", p, maxConns)
	}
}

// countedConn decrements open once when it is closed.
type countedConn struct {
	net.Conn
	open *atomic.Int32
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.Conn.Close()
}
