package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/locking-center/locking-center/internal/testcerts"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/store"
)

// bigLastToken is the last fencing token of the log big-token-wal writes:
// the next grant's token is above 2^63, where a signed 64-bit integer
// (or a double) would go wrong.
const bigLastToken = 1<<63 + 1<<20

// certFailure carries a failure of testcerts out of writeTLSFiles.
type certFailure struct{ err error }

// certT is what testcerts needs of a test, for a command: a failure
// panics with a certFailure, which writeTLSFiles recovers.
type certT struct{}

func (certT) Helper()           {}
func (certT) Fatal(args ...any) { panic(certFailure{errors.New(fmt.Sprint(args...))}) }

// writeTLSFiles writes to dir a new CA (ca.crt) and a server certificate
// it signed for localhost, 127.0.0.1 and ::1, with its key (server.crt,
// server.key).
func writeTLSFiles(dir string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(certFailure)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("tls-files %s: %w", dir, f.err)
		}
	}()
	ca := testcerts.NewCA(certT{}, "locking-center conformance CA")
	ca.Write(certT{}, dir, "ca")
	ca.Server(certT{}).Write(certT{}, dir, "server")
	return nil
}

// writeBigTokenWAL writes a write-ahead log at path that holds a snapshot
// of an empty table whose last fencing token is bigLastToken. path must
// not exist.
func writeBigTokenWAL(path string) error {
	t := mutex.NewTable()
	t.Import(&mutex.Record{Kind: mutex.RecordState, LastToken: bigLastToken})
	t.FinishImport()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := store.WriteSnapshot(f, t); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
