package export

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// state is the --since-state file: each shard's highest exported seq, as
// the last run left it. It is a cache: a run reads the parts anyway, and
// reports where the two disagree (a run that stopped after publishing and
// before saving the state, or parts removed by hand).
type state struct {
	Version int                   `json:"version"`
	Shards  map[string]stateShard `json:"shards"`
}

type stateShard struct {
	LastSeq     uint64 `json:"last_seq"`
	Incarnation uint64 `json:"incarnation,omitempty"`
	Deleted     bool   `json:"deleted,omitempty"`
}

const stateVersion = 1

func newState() *state { return &state{Version: stateVersion, Shards: map[string]stateShard{}} }

// loadState reads path; a missing file (or no path) is an empty state.
func loadState(path string) (*state, error) {
	if path == "" {
		return newState(), nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return newState(), nil
	}
	if err != nil {
		return nil, err
	}
	st := newState()
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("%s: state version %d, want %d", path, st.Version, stateVersion)
	}
	if st.Shards == nil {
		st.Shards = map[string]stateShard{}
	}
	return st, nil
}

// save replaces path atomically: a temporary file, fsynced, renamed.
func (st *state) save(path string) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("export: state file: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("export: state file %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}
