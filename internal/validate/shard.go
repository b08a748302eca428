package validate

import (
	"strconv"
	"strings"
)

// Shard grammar limits.
const (
	// MaxShardBytes is the maximum length of a whole shard name.
	MaxShardBytes = 255
	// MaxShardSegments is the maximum number of '/'-separated segments.
	MaxShardSegments = 4
	// MaxSegmentBytes is the maximum length of one segment.
	MaxSegmentBytes = 63
)

// Shard checks a shard name: one to MaxShardSegments '/'-separated segments,
// each 1 to MaxSegmentBytes characters of [a-z0-9._-] that start with a
// letter or digit, and at most MaxShardBytes in all.
//
// An accepted shard is plain lowercase ASCII with no empty, "." or ".."
// segment and no leading or trailing '/', so it can be used verbatim inside a
// blob name or a path: "shards/" + shard + "/x" is already clean and stays
// under "shards/". It behaves the same on case-insensitive disks, and
// authorization can match it segment by segment.
//
// Storage layouts should note that a shard's prefix also holds the names of
// shards nested under it ("a/" contains "a/b/..."). Since no segment starts
// with '.', '_' or '-', names such as "shards/a/_manifest" can never collide
// with a nested shard.
func Shard(s string) error {
	const field = "shard"
	if s == "" {
		return &FieldError{Field: field, Rule: "required"}
	}
	if len(s) > MaxShardBytes {
		return fieldErr(field, "must be at most "+strconv.Itoa(MaxShardBytes)+" bytes", "got %d", len(s))
	}
	// Check the alphabet first: it gives the most precise message for
	// things like upper case, unicode, spaces or backslashes.
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isShardByte(c) && c != '/' {
			return fieldErr(field, "must contain only a-z, 0-9, '.', '_', '-' and '/' between segments",
				"got %s at byte %d", quoteByte(c), i)
		}
	}
	if n := strings.Count(s, "/") + 1; n > MaxShardSegments {
		return fieldErr(field, "must have 1 to "+strconv.Itoa(MaxShardSegments)+" segments separated by '/'",
			"got %d", n)
	}
	n := -1
	for seg := range strings.SplitSeq(s, "/") {
		n++
		switch {
		case seg == "":
			return fieldErr(field, "segments must not be empty",
				"segment %d is empty (leading, trailing or doubled '/')", n+1)
		case len(seg) > MaxSegmentBytes:
			return fieldErr(field, "segments must be at most "+strconv.Itoa(MaxSegmentBytes)+" characters",
				"segment %d has %d", n+1, len(seg))
		case !isLowerAlnum(seg[0]):
			return fieldErr(field, "segments must start with a lowercase letter or digit",
				"segment %d starts with %s", n+1, quoteByte(seg[0]))
		}
	}
	return nil
}

// AllShards is the scope that covers every shard: an authorization grant
// of "*", or a listing with no prefix ("").
const AllShards = "*"

// Covers reports whether scope covers shard on whole segments ("" and
// AllShards cover all): "team-a" covers "team-a" and "team-a/run1", not
// "team-ab". It is the one meaning of a shard prefix, for authorization
// grants, ListShards and the commands' --prefix.
func Covers(scope, shard string) bool {
	if scope == "" || scope == AllShards || shard == scope {
		return true
	}
	return len(shard) > len(scope) && shard[len(scope)] == '/' && strings.HasPrefix(shard, scope)
}

func isLowerAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

func isShardByte(c byte) bool { return isLowerAlnum(c) || c == '.' || c == '_' || c == '-' }

// quoteByte quotes one byte of input for an error message, escaping anything
// that is not printable ASCII (including the bytes of non-ASCII UTF-8).
func quoteByte(c byte) string { return strconv.QuoteToASCII(string([]byte{c})) }
