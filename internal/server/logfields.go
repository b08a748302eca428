package server

import (
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Bounds on what a client can make the server write: a log line or a status
// message must never grow with what the client sent. A 16 MiB shard name
// costs a client 16 MiB to send once; logged verbatim on every refusal it
// would cost the log far more.
const (
	// maxLoggedClientString bounds each client-supplied string in a log
	// line: shard names, record ids, request ids, identities.
	maxLoggedClientString = 256
	// maxLoggedError bounds an error text in a log line. Error texts embed
	// client-supplied strings (a refused shard name) as well as the
	// server's own.
	maxLoggedError = 4 << 10
	// maxStatusMessage bounds the message of a status sent to a client.
	maxStatusMessage = 1 << 10
)

// truncated marks a string cut to its bound.
const truncated = "…(truncated)"

// clientString is a log field of a string the client supplied, cut to
// maxLoggedClientString bytes. A cut string ends in "…(truncated)" and is
// followed by key_len, its full length in bytes:
//
//	"shard":"aaaa…(truncated)","shard_len":16777216
func clientString(key, s string) zap.Field {
	return boundedString(key, s, maxLoggedClientString)
}

// errorField is the error field of a log line, its text cut to
// maxLoggedError bytes like clientString.
func errorField(err error) zap.Field {
	if err == nil {
		return zap.Skip()
	}
	return boundedString("error", err.Error(), maxLoggedError)
}

// boundedString is the field key=s, with s cut to limit bytes (and key_len
// added) when it is longer.
func boundedString(key, s string, limit int) zap.Field {
	if len(s) <= limit {
		return zap.String(key, s)
	}
	return zap.Inline(cutString{key: key, s: s, limit: limit})
}

// cutString is a string field too long to log whole.
type cutString struct {
	key   string
	s     string
	limit int
}

func (c cutString) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString(c.key, truncate(c.s, c.limit))
	enc.AddInt(c.key+"_len", len(c.s))
	return nil
}

// truncate returns s if it has at most limit bytes, else its first bytes,
// cut at a character boundary, followed by "…(truncated)"; the result has
// at most limit bytes plus that marker.
func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	i := limit
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + truncated
}
