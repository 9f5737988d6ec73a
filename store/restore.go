package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/locking-center/locking-center/mutex"
)

// ErrNotEmpty: Restore was pointed at a data path that already holds a
// log.
var ErrNotEmpty = errors.New("store: data path is not empty")

// Restore writes t as a new write-ahead log at path, the file a log
// compacted to t would be, so that Open (and lcd with DATA_PATH=path)
// starts from t. The path must not exist or be an empty file; the log's
// lock is taken while the file is written, so no lcd can have it open.
// The file is written beside path, fsynced, renamed into place and its
// directory fsynced. Errors: ErrNotEmpty, ErrNotRegular, ErrLocked, or
// the file system's, each naming the path; on an error path is left as
// it was.
func Restore(path string, t *mutex.Table) error {
	real, err := resolvePath(path)
	if err != nil {
		return err
	}
	lock, err := lockFile(real + lockSuffix)
	if err != nil {
		return err
	}
	defer unlockFile(lock)
	switch fi, err := os.Stat(real); {
	case err == nil && fi.Size() > 0:
		return fmt.Errorf("%w: %s holds %d bytes; restore to a new or empty data path", ErrNotEmpty, path, fi.Size())
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("store: restore %s: %w", path, err)
	}
	tmp := real + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, filePerm)
	if err != nil {
		return fmt.Errorf("store: restore %s: %w", path, err)
	}
	_, err = WriteSnapshot(f, t)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, real)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("store: restore %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(real))
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		return fmt.Errorf("store: restore %s: fsync directory: %w", path, err)
	}
	return nil
}
