// Package azure is rolloutd's Azure Blob Storage backend: a blob.Store on
// the azblob SDK.
//
// A process builds one Store and shares it: one SDK client over one
// explicitly sized HTTP transport (a transport per client leaves a socket
// in TIME_WAIT per request: docs/performance.md, target 2). Conditional writes stay
// correct under the SDK's own retries: every conditional put records an
// idempotency key in the blob's metadata, and when a retry then loses its
// condition the Store reads the blob back to see whether the loser was in
// fact an earlier try of the same put whose response was lost.
package azure

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// Store is a blob.Store on one Azure Blob Storage container. It is safe for
// concurrent use. Build it once per process with New and Close it last.
type Store struct {
	client    *container.Client
	transport *http.Transport
	prefix    string // "" or ending in "/"
	container string
	mustExist bool // never create the container (Config.MustExist)
	log       *zap.Logger

	slots chan struct{} // bounds requests in flight to MaxConns

	startFromIgnored atomic.Uint64

	mu       sync.Mutex
	closed   bool
	inflight sync.WaitGroup
}

var _ blob.Store = (*Store)(nil)

// New builds the Store: it validates cfg, builds the client, and creates
// the container if it is missing, so that a missing or forbidden container
// fails here and never on the first append. It sends requests (bounded by
// ctx) only to check the container.
func New(ctx context.Context, cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	prefix, _ := normalizePrefix(cfg.Prefix)

	tr := newTransport(&cfg)
	var rt http.RoundTripper = tr
	if cfg.WrapTransport != nil {
		rt = cfg.WrapTransport(rt)
	}
	httpClient := &http.Client{Transport: rt}
	opts := &container.ClientOptions{
		ClientOptions: azcore.ClientOptions{
			Transport: httpClient,
			Retry: policy.RetryOptions{
				MaxRetries:    int32(cfg.MaxRetries),
				TryTimeout:    cfg.TryTimeout,
				RetryDelay:    cfg.RetryDelay,
				MaxRetryDelay: cfg.MaxRetryDelay,
			},
			PerRetryPolicies: []policy.Policy{tryRecorder{metrics: cfg.Tries}},
			Telemetry:        policy.TelemetryOptions{ApplicationID: "rolloutd"},
		},
	}

	var (
		client *container.Client
		err    error
	)
	if cfg.ConnectionString != "" {
		client, err = container.NewClientFromConnectionString(cfg.ConnectionString, cfg.Container, opts)
		if err != nil {
			tr.CloseIdleConnections()
			// The SDK's messages never quote the string; ours must not either.
			return nil, fmt.Errorf("azure: the storage connection string is invalid (not shown: it holds a secret): %w", err)
		}
	} else {
		u, err := checkURL(cfg.AccountURL)
		if err != nil {
			tr.CloseIdleConnections()
			return nil, fmt.Errorf("azure: account URL %q: %w", cfg.AccountURL, err)
		}
		cred := cfg.Credential
		if cred == nil {
			cred, err = azidentity.NewDefaultAzureCredential(&azidentity.DefaultAzureCredentialOptions{
				ClientOptions: azcore.ClientOptions{Transport: httpClient},
			})
			if err != nil {
				tr.CloseIdleConnections()
				return nil, fmt.Errorf("azure: building the default Azure credential: %w", err)
			}
		}
		client, err = container.NewClient(runtime.JoinPaths(u, cfg.Container), cred, opts)
		if err != nil {
			tr.CloseIdleConnections()
			return nil, fmt.Errorf("azure: account URL %q: %w", cfg.AccountURL, err)
		}
	}
	if _, err := checkURL(client.URL()); err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("azure: the storage connection string's blob endpoint is invalid: %w", err)
	}

	s := &Store{
		client:    client,
		transport: tr,
		prefix:    prefix,
		container: cfg.Container,
		mustExist: cfg.MustExist,
		log:       cfg.Logger.With(zap.String("container", cfg.Container)),
		slots:     make(chan struct{}, cfg.MaxConns),
	}
	if err := s.ensureContainer(ctx); err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	return s, nil
}

func checkURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("unparseable URL")
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", errors.New("want an http or https URL with a host")
	}
	return raw, nil
}

// ensureContainer creates the container, or checks that it exists when the
// identity may use it but not create it, or when it must exist.
func (s *Store) ensureContainer(ctx context.Context) error {
	if s.mustExist {
		_, err := s.client.GetProperties(ctx, nil)
		switch {
		case err == nil:
			return nil
		case bloberror.HasCode(err, bloberror.ContainerNotFound):
			return fmt.Errorf("azure: container %q does not exist (%w)", s.container, native(err))
		}
		return fmt.Errorf("azure: container %q: %w", s.container, native(err))
	}
	_, err := s.client.Create(ctx, nil)
	switch {
	case err == nil:
		s.log.Info("created the blob container")
		return nil
	case bloberror.HasCode(err, bloberror.ContainerAlreadyExists):
		return nil
	case statusCode(err) != http.StatusForbidden:
		return fmt.Errorf("azure: creating container %q: %w", s.container, native(err))
	}
	// Creating is forbidden; an identity with a container-scoped role may
	// still use an existing container.
	_, gerr := s.client.GetProperties(ctx, nil)
	if gerr == nil {
		return nil
	}
	switch {
	case bloberror.HasCode(gerr, bloberror.ContainerNotFound):
		return fmt.Errorf("azure: container %q does not exist and creating it was not permitted (%w): "+
			"create it, or grant the identity the \"Storage Blob Data Contributor\" role on the storage account", s.container, native(err))
	case bloberror.HasCode(err, bloberror.AuthenticationFailed), bloberror.HasCode(gerr, bloberror.AuthenticationFailed):
		return fmt.Errorf("azure: container %q: the service rejected the credentials (%w); "+
			"check the account key or SAS in the connection string, or the identity used with the account URL", s.container, native(gerr))
	case bloberror.HasCode(err, bloberror.AuthorizationFailure), bloberror.HasCode(gerr, bloberror.AuthorizationFailure):
		// Real Azure says this for network rules and SAS permissions;
		// Azurite for a wrong account key.
		return fmt.Errorf("azure: container %q: the request was not authorized (%w); check the credentials "+
			"(account key, SAS permissions, or the identity's \"Storage Blob Data Contributor\" role on the account or container) "+
			"and the storage account's network rules", s.container, native(gerr))
	}
	return fmt.Errorf("azure: container %q: creating it was not permitted (%w) and reading it failed (%w): "+
		"grant the identity the \"Storage Blob Data Contributor\" role on the storage account or on the container", s.container, native(err), native(gerr))
}

// Close waits for operations in flight, then closes idle connections.
// Operations after Close fail with blob.ErrClosed. It is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.inflight.Wait()
	s.transport.CloseIdleConnections()
	return nil
}

// begin admits one operation: it refuses after Close and waits, bounded by
// ctx, for one of the MaxConns request slots.
func (s *Store) begin(ctx context.Context) (release func(), err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, blob.ErrClosed
	}
	s.inflight.Add(1)
	s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		s.inflight.Done()
		return nil, err
	}
	select {
	case s.slots <- struct{}{}:
		return func() { <-s.slots; s.inflight.Done() }, nil
	case <-ctx.Done():
		s.inflight.Done()
		return nil, ctx.Err()
	}
}

// fullName validates a caller's blob name and returns the stored name.
func (s *Store) fullName(name string) (string, error) {
	if err := blob.ValidateName(name); err != nil {
		return "", err
	}
	full := s.prefix + name
	if len(full) > blob.MaxNameBytes {
		return "", fmt.Errorf("%w %q: with the store's prefix %q it is longer than %d bytes",
			blob.ErrInvalidName, name, s.prefix, blob.MaxNameBytes)
	}
	return full, nil
}

// The put id lives in blob metadata. Metadata keys are case-insensitive and
// Azurite changes their case, so they are matched case-insensitively. A caller's
// PutID and one the Store generated use different keys, so that Head
// reports only the caller's.
const (
	putIDKey     = "rolloutdputid"
	autoPutIDKey = "rolloutdautoputid"
)

func metaValue(md map[string]*string, key string) string {
	for k, v := range md {
		if v != nil && strings.EqualFold(k, key) {
			if s, err := url.PathUnescape(*v); err == nil {
				return s
			}
			return *v
		}
	}
	return ""
}

// metaEncode makes any put id a valid header value.
func metaEncode(id string) *string {
	e := url.PathEscape(id)
	return &e
}
