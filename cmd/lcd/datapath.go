package main

import (
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// openDataPath opens the write-ahead log at cfg.DataPath.
func openDataPath(cfg Config, log *slog.Logger, reg prometheus.Registerer) (store, error) {
	return store{}, errors.New("DATA_PATH " + cfg.DataPath + ": durability is not available in this build")
}
