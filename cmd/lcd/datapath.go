package main

import (
	"log/slog"

	wal "github.com/locking-center/locking-center/store"
	"github.com/prometheus/client_golang/prometheus"
)

// openDataPath opens the write-ahead log at cfg.DataPath: it takes the
// log's lock, replays it and registers the store's counters on reg. The
// returned store restores the table and closes the log at exit.
// Symbolic links in cfg.DataPath are resolved first, so every name of one
// file takes the same lock. The store logs a warning when the log's volume
// has less free space than its compaction threshold. Errors: the path is
// not a regular file (a device, a named pipe, a socket, a directory), or
// the log is locked by another process, corrupt, or cannot be created or
// read; each names the file. serve turns each into exit code 4.
func openDataPath(cfg Config, log *slog.Logger, reg prometheus.Registerer) (store, error) {
	l, table, err := wal.Open(wal.Config{Path: cfg.DataPath, Logger: log, Registerer: reg})
	if err != nil {
		return store{}, err
	}
	return store{
		journal:  l,
		restored: table,
		close: func() {
			if err := l.Close(); err != nil {
				log.Error("closing the write-ahead log", slog.String("path", cfg.DataPath), slog.Any("error", err))
			}
		},
	}, nil
}
