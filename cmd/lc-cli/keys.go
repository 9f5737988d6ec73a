package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/locking-center/locking-center/manager"
	"github.com/locking-center/locking-center/mutex"
	"github.com/spf13/cobra"
)

// acquiredLayout is how keys -d prints the time of a grant: local date and
// 24-hour time to the second.
const acquiredLayout = "2006-01-02 15:04:05"

type keysOptions struct {
	Stdout   io.Writer
	Signals  <-chan os.Signal
	Manager  *managers
	Detail   bool           // -d: one row per holder instead of the bare keys
	Location *time.Location // zone of the ACQUIRED column
	Output   outputFormat   // -o
}

func newKeysCommand(f *factory) *cobra.Command {
	opts := &keysOptions{}
	cmd := &cobra.Command{
		Use:   "keys [-d]",
		Short: "List the held keys",
		Long: `keys prints the held keys, one a line, sorted by their bytes. A key that
is printable UTF-8, with no backslash, no double quote and no space at
either end, is printed as it is; any other is printed as a Go string in
double quotes, such as "\xff" or "a\x00b", so no two keys print alike.
Pass a line back with --quoted to name that key in lock, trylock, unlock,
wait or reset. Sources in the SOURCE column are printed the same way.

With -d it prints a table instead, one row per holder (a shared key or a
semaphore has a row for each of its holders):

  KEY      the key
  SOURCE   the owner name its holder sent (or the holder's IP address),
           - when unknown
  REMOTE   the address of the connection that won the key
  ACQUIRED when the key was granted, in local time (24-hour clock)
  HELD     how long it has been held, by the server's clock
  WAITERS  how many lock requests are queued for the key
  TOKEN    the lock's fencing token
  SESSION  the session that holds it (session protocol), - for a v1 lock
  MODE     exclusive, shared, or semaphore/N (a key of N places); xK when
           a reentrant holder holds it K times
  HOLDERS  how many holders the key has
  LEASE    what is left of the lock's own lease, - when it has none`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Stdout = cmd.OutOrStdout()
			opts.Signals = f.sys.Signals
			m, err := f.managers()
			if err != nil {
				return err
			}
			opts.Manager = m
			opts.Location = f.sys.Location
			return runKeys(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.Detail, "detail", "d", false, "show source, remote address, acquired time, held duration, waiters, token, session, mode, lease and the holder's note")
	addOutputFlag(cmd, &opts.Output, `{"keys":[...]}, with -d {"holders":[...]}`)
	return cmd
}

func runKeys(ctx context.Context, opts *keysOptions) error {
	m := opts.Manager
	var holders []manager.Holder
	var keys []string
	err := interruptibly(ctx, opts.Signals, "list keys at "+m.Addr(), func(ctx context.Context) (err error) {
		return m.atLeader(ctx, true, func(ctx context.Context, c *manager.Client) (err error) {
			if opts.Detail {
				holders, err = c.Holders(ctx)
			} else {
				keys, err = c.Keys(ctx)
			}
			return err
		})
	}, nil)
	if err != nil {
		return asFailure(err)
	}
	switch {
	case opts.Output == outputJSON && opts.Detail:
		return writeJSON(opts.Stdout, struct {
			Holders []jsonHolder `json:"holders"`
		}{holdersJSON(holders)})
	case opts.Output == outputJSON:
		out := struct {
			Keys []jsonKey `json:"keys"`
		}{Keys: []jsonKey{}}
		for _, k := range keys {
			out.Keys = append(out.Keys, jsonKey{jsonText(k), hexOf(k)})
		}
		return writeJSON(opts.Stdout, out)
	case opts.Detail:
		return writeHolders(opts.Stdout, holders, opts.Location)
	}
	for _, k := range keys {
		fmt.Fprintln(opts.Stdout, displayKey(k))
	}
	return nil
}

// writeHolders prints holders as the keys -d table: a header row, then one
// row per holder, columns two spaces apart, text left-aligned and numbers
// right-aligned.
func writeHolders(w io.Writer, holders []manager.Holder, loc *time.Location) error {
	if loc == nil {
		loc = time.Local
	}
	t := table{
		header: []string{"KEY", "SOURCE", "REMOTE", "ACQUIRED", "HELD", "WAITERS", "TOKEN", "SESSION", "MODE", "HOLDERS", "LEASE", "NOTE"},
		right:  []bool{false, false, false, false, true, true, true, true, false, true, true, false},
	}
	perKey := map[string]int{}
	for _, h := range holders {
		perKey[h.Key]++
	}
	for _, h := range holders {
		session, lease := "-", "-"
		if h.Session != 0 {
			session = strconv.FormatUint(h.Session, 10)
		}
		if h.Lease >= 0 && h.Session != 0 {
			lease = formatHeld(h.Lease)
		}
		t.rows = append(t.rows, []string{
			displayKey(h.Key),
			cell(h.Source),
			cell(h.RemoteAddr),
			h.Acquired.In(loc).Format(acquiredLayout),
			formatHeld(h.Held),
			strconv.Itoa(h.Waiters),
			strconv.FormatUint(h.Token, 10),
			session,
			modeOf(h),
			strconv.Itoa(perKey[h.Key]),
			lease,
			cell(h.Note),
		})
	}
	_, err := io.WriteString(w, t.String())
	return err
}

// jsonKey is a key in JSON.
type jsonKey struct {
	Key    *string `json:"key"`     // null when the key is not UTF-8
	KeyHex string  `json:"key_hex"` // its bytes
}

// jsonHolder is a row of keys -d in JSON.
type jsonHolder struct {
	jsonKey
	Source    *string `json:"source"` // null when unknown or not UTF-8
	SourceHex string  `json:"source_hex"`
	Remote    *string `json:"remote"`
	Acquired  string  `json:"acquired"`
	HeldMS    int64   `json:"held_ms"`
	Waiters   int     `json:"waiters"`
	Token     *string `json:"token"`
	Session   *string `json:"session"` // null for a v1 lock
	Mode      string  `json:"mode"`    // exclusive or shared
	Limit     uint32  `json:"limit"`   // 1, or N for a semaphore
	Count     uint32  `json:"count"`   // times a reentrant holder holds it
	Holders   int     `json:"holders"`
	LeaseMS   *int64  `json:"lease_ms"` // null when the lock has no lease
	Note      *string `json:"note"`
}

// holdersJSON returns holders as keys -d -o json prints them.
func holdersJSON(holders []manager.Holder) []jsonHolder {
	perKey := map[string]int{}
	for _, h := range holders {
		perKey[h.Key]++
	}
	out := []jsonHolder{}
	for _, h := range holders {
		mode := "exclusive"
		if h.Mode == mutex.Shared {
			mode = "shared"
		}
		var lease *int64
		if h.Lease >= 0 && h.Session != 0 {
			ms := jsonMillis(h.Lease)
			lease = &ms
		}
		out = append(out, jsonHolder{
			jsonKey:   jsonKey{jsonText(h.Key), hexOf(h.Key)},
			Source:    jsonOptional(h.Source),
			SourceHex: hexOf(h.Source),
			Remote:    jsonOptional(h.RemoteAddr),
			Acquired:  jsonTime(h.Acquired),
			HeldMS:    jsonMillis(h.Held),
			Waiters:   h.Waiters,
			Token:     jsonID(h.Token),
			Session:   jsonID(h.Session),
			Mode:      mode,
			Limit:     max(h.Limit, 1),
			Count:     max(h.Count, 1),
			Holders:   perKey[h.Key],
			LeaseMS:   lease,
			Note:      jsonOptional(h.Note),
		})
	}
	return out
}

// modeOf names how h holds its key: exclusive, shared or semaphore/N,
// with xK for a reentrant count above one.
func modeOf(h manager.Holder) string {
	m := "exclusive"
	switch {
	case h.Mode == mutex.Shared:
		m = "shared"
	case h.Limit > 1:
		m = fmt.Sprintf("semaphore/%d", h.Limit)
	}
	if h.Count > 1 {
		m += fmt.Sprintf(" x%d", h.Count)
	}
	return m
}

// cell returns how keys -d shows a source or remote address: "-" when it
// is empty (unknown), quoted when it is "-" itself so it never reads as
// unknown, and as displayKey prints it otherwise.
func cell(s string) string {
	switch s {
	case "":
		return "-"
	case "-":
		return strconv.Quote(s)
	}
	return displayKey(s)
}

// formatHeld prints a held duration compactly and without rounding up:
// 4.5s, 59.9s, 1m13s, 3h04m05s, 2d03h04m.
func formatHeld(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d.%ds", d/time.Second, d%time.Second/(100*time.Millisecond))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", d/time.Minute, d%time.Minute/time.Second)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm%02ds", d/time.Hour, d%time.Hour/time.Minute, d%time.Minute/time.Second)
	default:
		day := 24 * time.Hour
		return fmt.Sprintf("%dd%02dh%02dm", d/day, d%day/time.Hour, d%time.Hour/time.Minute)
	}
}

// table is rows of cells printed in aligned columns, measured in terminal
// columns (displayWidth).
type table struct {
	header []string
	right  []bool // per column: align right
	rows   [][]string
}

func (t table) String() string {
	width := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for i, cell := range row {
			width[i] = max(width[i], displayWidth(cell))
		}
	}
	var b strings.Builder
	for _, row := range append([][]string{t.header}, t.rows...) {
		var line strings.Builder
		for i, cell := range row {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-displayWidth(cell))
			if t.right[i] {
				line.WriteString(pad + cell)
			} else {
				line.WriteString(cell + pad)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	return b.String()
}
