// Package term tells whether output goes to a terminal, for the live
// progress of rolloutd export and rolloutbench: a line rewritten in place
// on a terminal, plain lines in a log or a pipe.
package term

import (
	"io"
	"os"
)

// IsTerminal reports whether w is a file on a character device, as a
// terminal is. A pipe, a regular file or an in-memory writer is not.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
