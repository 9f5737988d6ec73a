package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/klauspost/crc32"
	"github.com/locking-center/locking-center/mutex"
)

var update = flag.Bool("update", false, "rewrite the fixtures and the fuzz seed corpus in testdata")

// writeFile writes b to a new log file and returns its path.
func writeFile(t *testing.T, b []byte) string {
	t.Helper()
	path := tempLogPath(t)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fileSize returns the size of the file at path.
func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Cutting the log anywhere inside its last record is a torn write: Open
// drops the record, truncates the file to the record before it, serves
// the rest, and appends after it.
func TestOpenCutLastRecord(t *testing.T) {
	changes := history()
	full, offs := encodeLog(changes)
	last := len(changes) - 1
	for cut := offs[last]; cut < len(full); cut++ {
		path := writeFile(t, full[:cut])
		l, table := openLog(t, path, Config{})
		sameTable(t, table, model(changes[:last]))
		if got := fileSize(t, path); got != int64(offs[last]) {
			t.Fatalf("cut at %d: file is %d bytes after open, want %d", cut, got, offs[last])
		}
		extra := acquire("after-cut", "s", "a", epoch.Add(time.Minute))
		mustAppend(t, l, extra)
		sameTable(t, reopen(t, l, path), model(append(changes[:last:last], extra)))
	}
}

// Zero bytes at the end of the file (a size that reached the disk before
// the data did) are a torn tail too, whatever their length.
func TestOpenZeroTail(t *testing.T) {
	changes := history()
	full, offs := encodeLog(changes)
	last := len(changes) - 1
	for _, n := range []int{1, HeaderLen - 1, HeaderLen, HeaderLen + 1, 100, 4096, 70000} {
		path := writeFile(t, append(bytes.Clone(full), make([]byte, n)...))
		_, table := openLog(t, path, Config{})
		sameTable(t, table, model(changes))
		if got := fileSize(t, path); got != int64(len(full)) {
			t.Fatalf("%d zero bytes: file is %d bytes after open, want %d", n, got, len(full))
		}
	}
	// The last record zeroed from any byte on.
	for from := offs[last]; from < len(full); from++ {
		b := bytes.Clone(full)
		clear(b[from:])
		path := writeFile(t, b)
		_, table := openLog(t, path, Config{})
		sameTable(t, table, model(changes[:last]))
	}
}

// Flipping any byte of a record in the middle of the log is corruption:
// Open refuses, names the file and the record's offset, and leaves the
// file as it was.
func TestOpenFlipMiddleRecord(t *testing.T) {
	changes := history()
	full, offs := encodeLog(changes)
	mid := len(changes) / 2
	for i := offs[mid]; i < offs[mid+1]; i++ {
		for _, mask := range []byte{0x01, 0xff} {
			b := bytes.Clone(full)
			b[i] ^= mask
			path := writeFile(t, b)
			l, _, err := Open(Config{Path: path})
			if err == nil {
				l.Close()
				t.Fatalf("byte %d ^ %#x: open succeeded", i, mask)
			}
			var ce *CorruptError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
				t.Fatalf("byte %d ^ %#x: got %v, want a CorruptError", i, mask, err)
			}
			if ce.Path != path || ce.Offset != int64(offs[mid]) {
				t.Fatalf("byte %d ^ %#x: error names %s at %d, want %s at %d", i, mask, ce.Path, ce.Offset, path, offs[mid])
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, b) {
				t.Fatalf("byte %d ^ %#x: the file changed", i, mask)
			}
		}
	}
}

// A damaged length never makes replay read or allocate past the file:
// the bytes left bound it before it is used.
func TestOpenLengthPastEnd(t *testing.T) {
	h := make([]byte, HeaderLen)
	binary.LittleEndian.PutUint32(h[0:4], MaxPayload)
	binary.LittleEndian.PutUint32(h[4:8], crc32.Checksum(h[0:4], castagnoli))
	full, _ := encodeLog(history())
	path := writeFile(t, append(bytes.Clone(full), append(h, "short"...)...))
	_, table := openLog(t, path, Config{})
	sameTable(t, table, model(history()))
}

// fixture is one file in testdata and what opening it must give.
type fixture struct {
	name string
	data []byte
	// corruptAt is the offset Open must report, or -1 when it opens.
	corruptAt int
	// held are the changes that replay to the held keys; size is the file
	// size after Open.
	held []mutex.Command
	size int
}

// fixtures builds the files of testdata from history().
func fixtures() []fixture {
	changes := history()
	full, offs := encodeLog(changes)
	n := len(changes)
	mid := n / 2
	with := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(full)) }
	replace := func(i int, rec []byte) []byte {
		return with(func(b []byte) []byte {
			return append(append(b[:offs[i]:offs[i]], rec...), full[offs[i+1]:]...)
		})
	}
	huge := make([]byte, HeaderLen)
	binary.LittleEndian.PutUint32(huge[0:4], 1<<31)
	binary.LittleEndian.PutUint32(huge[4:8], crc32.Checksum(huge[0:4], castagnoli))
	nextCmd := acquire("next", "s", "a", epoch)
	next := appendRecord(nil, &nextCmd)
	whole := func(name string, data []byte) fixture {
		return fixture{name: name, data: data, corruptAt: -1, held: changes, size: len(full)}
	}
	torn := func(name string, data []byte, size int) fixture {
		return fixture{name: name, data: data, corruptAt: -1, held: changes[:n-1], size: size}
	}
	corrupt := func(name string, at int, data []byte) fixture {
		return fixture{name: name, data: data, corruptAt: at}
	}
	return []fixture{
		whole("valid.log", full),
		whole("torn-header.log", append(bytes.Clone(full), next[:HeaderLen-5]...)),
		whole("torn-payload.log", append(bytes.Clone(full), next[:len(next)-3]...)),
		whole("zero-tail.log", append(bytes.Clone(full), make([]byte, 4096)...)),
		torn("zeroed-last-record.log", with(func(b []byte) []byte { clear(b[offs[n-1]+20:]); return b }), offs[n-1]),
		torn("torn-last-record.log", full[:len(full)-1], offs[n-1]),
		corrupt("bad-payload-checksum.log", offs[mid], with(func(b []byte) []byte { b[offs[mid]+HeaderLen+3] ^= 0x20; return b })),
		corrupt("bad-length-checksum.log", offs[mid], with(func(b []byte) []byte { b[offs[mid]] ^= 0x01; return b })),
		corrupt("length-out-of-range.log", offs[mid], replace(mid, append(bytes.Clone(huge), full[offs[mid]+HeaderLen:offs[mid+1]]...))),
		corrupt("not-json.log", offs[mid], replace(mid, record("op=acquire key=k"))),
		corrupt("unknown-op.log", offs[mid], replace(mid, record(`{"op":"steal","at":1,"key":"aw=="}`))),
		corrupt("empty-key.log", offs[mid], replace(mid, record(`{"op":"release","at":1,"key":""}`))),
		corrupt("snapshot-after-commands.log", offs[mid], replace(mid, record(`{"op":"state","token":1}`))),
		corrupt("hole-before-data.log", offs[n-2], with(func(b []byte) []byte { clear(b[offs[n-2]+4 : offs[n-1]]); return b })),
	}
}

// The corrupt and torn files in testdata open, or refuse, as their table
// says. Run go test -update to rewrite them after a format change.
func TestFixtures(t *testing.T) {
	for _, fx := range fixtures() {
		t.Run(fx.name, func(t *testing.T) {
			file := filepath.Join("testdata", fx.name)
			if *update {
				if err := os.WriteFile(file, fx.data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(data, fx.data) {
				t.Fatalf("%s differs from what fixtures() builds; run go test -update", file)
			}
			path := writeFile(t, data)
			l, table, err := Open(Config{Path: path, Logger: testLogger(t)})
			if fx.corruptAt >= 0 {
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.Offset != int64(fx.corruptAt) {
					t.Fatalf("got %v, want corruption at offset %d", err, fx.corruptAt)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			sameTable(t, table, model(fx.held))
			if got := fileSize(t, path); got != int64(fx.size) {
				t.Fatalf("file is %d bytes after open, want %d", got, fx.size)
			}
		})
	}
}

// The seed corpus of the fuzz targets is committed in testdata/fuzz; -update
// rewrites it from history() and the fixtures.
func TestFuzzSeedCorpus(t *testing.T) {
	records := map[string][]byte{}
	payloads := map[string][]byte{}
	full, offs := encodeLog(history())
	offs = append(offs, len(full))
	for i := 0; i+1 < len(offs); i++ {
		rec := full[offs[i]:offs[i+1]]
		records[fmt.Sprintf("record-%d", i)] = rec
		records[fmt.Sprintf("record-%d-cut", i)] = rec[:len(rec)/2]
		payloads[fmt.Sprintf("payload-%d", i)] = rec[HeaderLen:]
	}
	for _, fx := range fixtures() {
		if fx.corruptAt >= 0 {
			records["fixture-"+fx.name] = fx.data[fx.corruptAt:]
		}
	}
	records["zeros"] = make([]byte, 2*HeaderLen)
	payloads["reordered"] = []byte(`{"key":"aw==","at":7,"op":"acquire"}`)
	payloads["escaped"] = []byte(`{"op":"release","at":7,"key":"a\u0077=="}`)
	payloads["legacy-grant"] = []byte(legacyGrant("k", "s", "a:1", epoch))
	payloads["legacy-release"] = []byte(`{"op":"release","key":"aw=="}`)
	for target, seeds := range map[string]map[string][]byte{"FuzzDecodeRecord": records, "FuzzPayload": payloads} {
		dir := filepath.Join("testdata", "fuzz", target)
		for name, b := range seeds {
			file := filepath.Join(dir, name)
			want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
			if *update {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got, err := os.ReadFile(file); err != nil || string(got) != want {
				t.Fatalf("%s is missing or stale (%v); run go test -update", file, err)
			}
		}
	}
}

// A log written before commands (v1 grants and releases, no tokens)
// replays to the same held keys, each with a fencing token; a later grant
// of a key wins, as it did then.
func TestLegacyLogReplays(t *testing.T) {
	var b []byte
	for _, p := range []string{
		legacyGrant("a", "s1", "10.0.0.1:1", epoch),
		legacyGrant("b", "s2", "10.0.0.2:2", epoch.Add(time.Second)),
		`{"op":"release","key":"YQ=="}`,
		legacyGrant("b", "s3", "10.0.0.3:3", epoch.Add(2*time.Second)),
		legacyGrant("\xff", "s4", "", epoch.Add(3*time.Second)),
	} {
		b = append(b, record(p)...)
	}
	path := writeFile(t, b)
	l, table := openLog(t, path, Config{})
	if got, want := heldKeys(table), []string{`"\xff"="s4"`, `"b"="s3"`}; !slices.Equal(got, want) {
		t.Fatalf("held %q, want %q", got, want)
	}
	var tokens []uint64
	table.Export(func(r *mutex.Record) {
		if r.Kind == mutex.RecordHolder {
			tokens = append(tokens, r.Token)
			if !r.Acquired.Equal(epoch.Add(2*time.Second)) && r.Key == "b" {
				t.Fatalf("b acquired at %v", r.Acquired)
			}
		}
	})
	if len(tokens) != 2 || tokens[0] == 0 || tokens[0] == tokens[1] {
		t.Fatalf("tokens %v", tokens)
	}
	// New commands go after the old records.
	mustAppend(t, l, release("b", epoch.Add(time.Hour)))
	if got := heldKeys(reopen(t, l, path)); !slices.Equal(got, []string{`"\xff"="s4"`}) {
		t.Fatalf("after a release held %q", got)
	}
}
