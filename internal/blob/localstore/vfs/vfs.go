// Package vfs is the small file-system interface the local store does all
// its file operations through: the operating system's in production
// (Default), and in tests a strict in-memory file system (NewStrictMem) that
// can show what a crash would leave, so that a missing fsync is caught,
// which a kill -9 (it keeps the page cache) never catches.
package vfs

import (
	"io"
	"io/fs"
)

// FS is what the local store needs of a file system. Paths are absolute
// and cleaned (filepath.Clean). Errors are *fs.PathError or *os.LinkError
// wrapping a syscall.Errno, so that errors.Is(err, fs.ErrNotExist),
// fs.ErrExist and syscall.ENOTDIR classify them as for the os package.
type FS interface {
	// Create creates name for writing; it fails with fs.ErrExist when name
	// exists (O_CREATE|O_EXCL).
	Create(name string) (File, error)
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
