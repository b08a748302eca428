// Package vfs is the small file-system interface the local store does all
// its file operations through: the operating system's in production
// (Default), and in tests a strict in-memory file system (NewStrictMem) that
// can show what a crash would leave, so that a missing fsync is caught,
// which a kill -9 (it keeps the page cache) never catches.
package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"sync/atomic"
	"syscall"
)

// FS is what the local store needs of a file system. Paths are absolute
// and cleaned (filepath.Clean). Errors are *fs.PathError or *os.LinkError
// wrapping a syscall.Errno, so that errors.Is(err, fs.ErrNotExist),
// fs.ErrExist and syscall.ENOTDIR classify them as for the os package.
type FS interface {
	// Create creates name for writing; it fails with fs.ErrExist when name
	// exists (O_CREATE|O_EXCL).
	Create(name string) (File, error)
	// CreateAnon creates a file with no name, for writing, on the file
	// system holding the directory dir (open(2) with O_TMPFILE): a crash
	// leaves nothing of it until Link names it, and creating it adds and
	// removes no directory entry. Where the file system cannot (NFS, SMB,
	// some FUSE mounts), it fails with an error matching
	// errors.ErrUnsupported.
	CreateAnon(dir string) (AnonFile, error)
	// Open opens a file or a directory for reading and Sync.
	Open(name string) (File, error)
	// Rename renames oldname to newname, replacing newname (rename(2)).
	Rename(oldname, newname string) error
	// Link makes newname another name of oldname; it fails with fs.ErrExist
	// when newname exists (link(2)).
	Link(oldname, newname string) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes name and everything below it; a missing name is no
	// error.
	RemoveAll(name string) error
	// Mkdir creates one directory.
	Mkdir(name string, perm fs.FileMode) error
	// MkdirAll creates a directory and its missing parents.
	MkdirAll(name string, perm fs.FileMode) error
	// ReadDir lists a directory, sorted by name.
	ReadDir(name string) ([]fs.DirEntry, error)
	// SyncFS makes everything on the file system that holds name durable
	// (syncfs(2)): file data, and directory entries.
	SyncFS(name string) error
	// Lock takes an exclusive lock on the file name, creating it, against
	// other processes and other locks in this one; ok is false when someone
	// else holds it. unlock releases it.
	Lock(name string) (unlock func() error, ok bool, err error)
}

// File is an open file or directory.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	io.Closer
	// Sync makes the file's data durable; for a directory, its entries
	// (fsync(2)).
	Sync() error
	Stat() (fs.FileInfo, error)
	// Name is the path the file was opened with.
	Name() string
}

// AnonFile is a file made by FS.CreateAnon. Close ends writing as for any
// file, and reports what close(2) reports; the file stays reachable for
// Link until Release.
type AnonFile interface {
	File
	// Link names the file newname, also after Close; it fails with
	// fs.ErrExist when newname exists (linkat(2)).
	Link(newname string) error
	// Release lets go of the file: unless Link named it, it is gone.
	Release() error
}

// anonSeq numbers the files CreateAnon makes.
var anonSeq atomic.Uint64

// anonName is the Name of a file made by CreateAnon in dir: a path no
// directory entry has, so that errors and faults can still say where, and
// one of its own, so that Faulty tells the files apart.
func anonName(dir string) string {
	return dir + "/(unnamed " + strconv.FormatUint(anonSeq.Add(1), 10) + ")"
}

// anonOpenError is CreateAnon's error for errno: one that matches
// errors.ErrUnsupported too where errno says the file system cannot make
// unnamed files (open(2) gives EOPNOTSUPP, or EISDIR or EINVAL on kernels
// and file systems that do not know O_TMPFILE).
func anonOpenError(dir string, errno syscall.Errno) error {
	var err error = errno
	switch errno {
	case syscall.EOPNOTSUPP, syscall.EISDIR, syscall.EINVAL:
		err = fmt.Errorf("%w: %w", errors.ErrUnsupported, errno)
	}
	return &fs.PathError{Op: "open O_TMPFILE", Path: dir, Err: err}
}
