package azure

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"go.uber.org/zap"

	"github.com/rolloutd/rolloutd/internal/blob"
)

// Defaults for the zero fields of Config.
const (
	DefaultMaxConns      = 64
	DefaultTryTimeout    = 10 * time.Second
	DefaultMaxRetries    = 3
	DefaultRetryDelay    = 200 * time.Millisecond
	DefaultMaxRetryDelay = 3 * time.Second
	// DefaultListMax is List's page size when max <= 0. Azure caps a page at
	// 5000 (MaxListMax).
	DefaultListMax = 1000
	MaxListMax     = 5000
)

// Config configures the one Store a process builds. Exactly one of
// ConnectionString and AccountURL must be set.
type Config struct {
	// Container holds every blob. New creates it when it is missing,
	// unless MustExist.
	// Azure's rules apply: 3-63 characters, lowercase letters, digits and
	// single hyphens, starting and ending with a letter or digit.
	Container string
	// Prefix, when set, is a name path ("tenant-a" or "envs/prod") under
	// which every blob lives: the Store reads and writes "<Prefix>/<name>",
	// and List returns names without it. It is validated like a blob name;
	// a trailing "/" is optional. Names plus the prefix must still fit
	// blob.MaxNameBytes.
	Prefix string
	// MustExist: New never creates the container, and fails when it is
	// missing. A reader of someone else's data (export's --store) sets
	// it: a misspelled source must not leave an empty container behind
	// in that account.
	MustExist bool

	// ConnectionString authenticates with an account key or a SAS (Azurite,
	// development). The caller reads it from AZURE_STORAGE_CONNECTION_STRING.
	// Errors never echo it.
	ConnectionString string
	// AccountURL, such as https://acct.blob.core.windows.net/, selects
	// Microsoft Entra ID auth: Credential, or azidentity's
	// DefaultAzureCredential (workload identity on AKS) when it is nil.
	AccountURL string
	Credential azcore.TokenCredential

	// MaxConns bounds the requests in flight and the connections open
	// (dialing included), and sizes the idle connection pool to match, so
	// that steady concurrency up to MaxConns reuses connections instead of
	// churning them (blob storage is HTTP/1.1: one request per connection).
	// Operations beyond it wait for a slot, bounded by their context. 0
	// means DefaultMaxConns.
	MaxConns int
	// TryTimeout bounds each HTTP try, including reading a Get's body; a
	// hung try is abandoned and retried. 0 means DefaultTryTimeout.
	TryTimeout time.Duration
	// MaxRetries is the number of retries after the first try. 0 means
	// DefaultMaxRetries; negative means none.
	MaxRetries int
	// RetryDelay and MaxRetryDelay shape the exponential backoff between
	// tries. 0 means DefaultRetryDelay and DefaultMaxRetryDelay.
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration

	// RootCAs, when set, replaces the system roots for TLS (tests against
	// an HTTPS Azurite).
	RootCAs *x509.CertPool
	// WrapTransport, when set, wraps the HTTP transport: a test hook for
	// injecting faults between the SDK and the wire.
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// Logger receives startup and recovery events; nil means zap.NewNop().
	Logger *zap.Logger
	// Tries, when set, counts every HTTP try by its status (NewTryMetrics),
	// including the tries the SDK retries without the caller seeing them.
	Tries *TryMetrics

	// Test hooks.
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	idlePerHost int // overrides the idle pool size (to imitate the SDK default)
}

func (c *Config) setDefaults() {
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.TryTimeout <= 0 {
		c.TryTimeout = DefaultTryTimeout
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	if c.MaxRetries < 0 {
		c.MaxRetries = -1 // the SDK's spelling of "no retries"
	}
	if c.RetryDelay <= 0 {
		c.RetryDelay = DefaultRetryDelay
	}
	if c.MaxRetryDelay <= 0 {
		c.MaxRetryDelay = DefaultMaxRetryDelay
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

func (c *Config) validate() error {
	if err := ValidateContainerName(c.Container); err != nil {
		return err
	}
	if _, err := normalizePrefix(c.Prefix); err != nil {
		return err
	}
	switch {
	case c.ConnectionString == "" && c.AccountURL == "":
		return errors.New("azure: neither a connection string nor an account URL is configured")
	case c.ConnectionString != "" && c.AccountURL != "":
		return errors.New("azure: both a connection string and an account URL are configured; set one")
	case c.Credential != nil && c.AccountURL == "":
		return errors.New("azure: a credential is only used with an account URL")
	}
	return nil
}

// ValidateContainerName checks Azure's container naming rules: 3-63
// characters of lowercase letters, digits and hyphens, starting and ending
// with a letter or digit, with no two hyphens in a row.
func ValidateContainerName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("azure: container name %q is invalid: %s "+
			"(Azure allows 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit)", name, why)
	}
	if len(name) < 3 || len(name) > 63 {
		return bad(fmt.Sprintf("length %d", len(name)))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-':
			if i == 0 || i == len(name)-1 {
				return bad("starts or ends with a hyphen")
			}
			if name[i-1] == '-' {
				return bad("has two hyphens in a row")
			}
		default:
			return bad(fmt.Sprintf("contains %q", rune(c)))
		}
	}
	return nil
}

// normalizePrefix validates a configured name prefix and returns it with
// exactly one trailing "/", or "" for none.
func normalizePrefix(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	t := strings.TrimSuffix(p, "/")
	if err := blob.ValidateName(t); err != nil {
		return "", fmt.Errorf("azure: name prefix %q: %w", p, err)
	}
	if len(t)+1 > blob.MaxNameBytes/2 {
		return "", fmt.Errorf("azure: name prefix %q: longer than %d bytes", p, blob.MaxNameBytes/2-1)
	}
	return t + "/", nil
}
