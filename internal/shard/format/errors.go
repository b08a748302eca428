package format

import "errors"

// ErrCorrupt classifies stored bytes that fail to decode or verify.
var ErrCorrupt = errors.New("corrupt stored data")
