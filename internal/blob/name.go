package blob

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameBytes is Azure's limit on a blob name.
const MaxNameBytes = 1024

// ValidateName rejects a blob name that is empty, too long, not UTF-8,
// absolute, or holds a NUL, a backslash, or an empty, "." or ".." segment.
// Such names could escape a storage prefix or a root directory.
func ValidateName(name string) error {
	if err := validatePath(name); err != nil {
		return fmt.Errorf("%w %q: %s", ErrInvalidName, name, err)
	}
	return nil
}

// ValidatePrefix is ValidateName for listing prefixes: "" (everything) and a
// trailing "/" are allowed.
func ValidatePrefix(prefix string) error {
	p := strings.TrimSuffix(prefix, "/")
	if p == "" && prefix == "" {
		return nil
	}
	if err := validatePath(p); err != nil {
		return fmt.Errorf("%w: prefix %q: %s", ErrInvalidName, prefix, err)
	}
	return nil
}

func validatePath(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty")
	case len(name) > MaxNameBytes:
		return fmt.Errorf("longer than %d bytes", MaxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("not valid UTF-8")
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("contains NUL")
	case strings.ContainsRune(name, '\\'):
		return fmt.Errorf("contains a backslash")
	case strings.HasPrefix(name, "/"):
		return fmt.Errorf("starts with /")
	}
	for _, seg := range strings.Split(name, "/") {
		switch seg {
		case "":
			return fmt.Errorf("has an empty segment")
		case ".", "..":
			return fmt.Errorf("has a %q segment", seg)
		}
	}
	return nil
}
